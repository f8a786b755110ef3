terraform {
  # Provider-free: everything the Grove derives from its inputs (controller ConfigMap, deploy trigger,
  # GPU node patches, GPU Operator values) is computed here, so a real engine can evaluate and test it
  # on a machine that cannot download providers.
  required_version = ">= 1.8"
}
