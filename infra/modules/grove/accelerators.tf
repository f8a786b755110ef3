################################################################################
# Accelerators (NVIDIA). Every resource here is gated on local.create_accelerators, which is false
# unless accelerators_enabled is set: an ordinary Grove plans none of this.
################################################################################

locals {
  create_accelerators = local.create && module.config.create_accelerators

  gpu_workers = local.create_accelerators ? { for node in var.gpu_workers : node.name => node } : {}
}

# External bare-metal GPU workers: joined by their mesh address, never created as VMs. Talos must be
# booted from the NVIDIA schematic's image on them and waiting in maintenance mode.
resource "talos_machine_configuration_apply" "gpu_worker" {
  for_each = local.gpu_workers

  client_configuration        = talos_machine_secrets.this[0].client_configuration
  machine_configuration_input = data.talos_machine_configuration.worker[0].machine_configuration
  node                        = each.value.mesh_address
  endpoint                    = each.value.mesh_address
  config_patches = concat(module.config.gpu_worker_config_patches, [yamlencode({
    machine = {
      network = { hostname = each.key }
      install = { disk = each.value.install_disk }
    }
  })])

  depends_on = [talos_machine_bootstrap.this]
}

resource "kubernetes_namespace_v1" "gpu_operator" {
  count = local.create_accelerators ? 1 : 0

  metadata {
    name = var.gpu_operator_namespace
    labels = {
      # The operator's daemonsets need host access; Talos enforces baseline Pod Security otherwise.
      "pod-security.kubernetes.io/enforce" = "privileged"
      "app.kubernetes.io/part-of"          = "forest"
    }
  }

  depends_on = [talos_cluster_kubeconfig.this]
}

resource "helm_release" "gpu_operator" {
  count = local.create_accelerators ? 1 : 0

  name       = "gpu-operator"
  namespace  = kubernetes_namespace_v1.gpu_operator[0].metadata[0].name
  repository = "https://helm.ngc.nvidia.com/nvidia"
  chart      = "gpu-operator"
  version    = var.gpu_operator_chart_version

  values = [module.config.gpu_operator_values]
}

resource "kubernetes_runtime_class_v1" "nvidia" {
  count = local.create_accelerators ? 1 : 0

  metadata {
    name = module.config.runtime_class_name
  }

  # The containerd runtime handler the nvidia-container-toolkit Talos extension registers.
  handler = "nvidia"

  depends_on = [talos_cluster_kubeconfig.this]
}
