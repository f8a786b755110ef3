output "cluster_name" {
  description = "Talos cluster name (the Grove name)."
  value       = local.create ? var.name : null
}

output "cluster_endpoint" {
  description = "Kubernetes API endpoint."
  value       = local.create ? local.cluster_endpoint : null
}

output "kubeconfig" {
  description = "Admin kubeconfig for the Grove."
  value       = try(talos_cluster_kubeconfig.this[0].kubeconfig_raw, null)
  sensitive   = true
}

output "kubernetes_client_configuration" {
  description = "host, ca_certificate, client_certificate and client_key (base64) for the kubernetes and helm providers."
  value       = try(talos_cluster_kubeconfig.this[0].kubernetes_client_configuration, null)
  sensitive   = true
}

output "talosconfig" {
  description = "talosctl client configuration for every node."
  value       = try(data.talos_client_configuration.this[0].talos_config, null)
  sensitive   = true
}

output "controller_config_sha256" {
  description = "Deploy trigger of forest-controller: sha256 of its ConfigMap data."
  value       = local.create ? module.config.controller_config_sha256 : null
}

output "accelerators_enabled" {
  description = "Whether accelerator resources are part of this Grove."
  value       = local.create_accelerators
}

output "gpu_operator_release" {
  description = "Name of the GPU Operator Helm release; null without accelerators."
  value       = try(helm_release.gpu_operator[0].name, null)
}

output "runtime_class_name" {
  description = "RuntimeClass GPU pods use; null without accelerators."
  value       = try(kubernetes_runtime_class_v1.nvidia[0].metadata[0].name, null)
}

output "gpu_worker_addresses" {
  description = "Mesh address of each external GPU worker, by name."
  value       = { for name, node in talos_machine_configuration_apply.gpu_worker : name => node.node }
}
