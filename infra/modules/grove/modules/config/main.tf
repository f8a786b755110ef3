locals {
  # Keys every Grove's controller gets. Nothing here may depend on accelerators_enabled: these keys
  # (and so the deploy-trigger hash) must stay byte-identical for an ordinary Grove whatever this
  # repository learns about GPUs, so a routine upgrade restarts nothing.
  controller_config_base = merge(var.controller_extra_config, {
    "grove.name"           = var.name
    "grove.substrate"      = "kubernetes"
    "host.url"             = var.host_url
    "controller.log_level" = var.controller_log_level
  })

  controller_config_accelerators = var.accelerators_enabled ? {
    "accelerators.vendor"        = "nvidia"
    "accelerators.api"           = "cuda"
    "accelerators.runtime_class" = "nvidia"
    "accelerators.resource_name" = "nvidia.com/gpu"
  } : {}

  controller_chart_yaml    = "${var.controller_chart_path}/Chart.yaml"
  controller_chart_found   = var.controller_chart_path != "" && fileexists(local.controller_chart_yaml)
  controller_chart_name    = local.controller_chart_found ? try(tostring(yamldecode(file(local.controller_chart_yaml)).name), "") : ""
  controller_chart_version = local.controller_chart_found ? try(tostring(yamldecode(file(local.controller_chart_yaml)).version), "") : ""

  controller_config         = merge(local.controller_config_base, local.controller_config_accelerators)
  controller_config_sha256  = sha256(jsonencode(local.controller_config))
  gpu_worker_installer_base = "${var.image_factory_host}/installer/${var.nvidia_talos_schematic_id}"

  # Talos NVIDIA guide: load the NVIDIA kernel modules shipped by the nonfree-kmod-nvidia extension and
  # set the sysctl NVIDIA's container runtime needs on Talos.
  gpu_worker_config_patch = {
    machine = {
      install = {
        image = "${local.gpu_worker_installer_base}:${var.talos_version}"
      }
      kernel = {
        modules = [
          { name = "nvidia" },
          { name = "nvidia_uvm" },
          { name = "nvidia_drm" },
          { name = "nvidia_modeset" },
        ]
      }
      sysctls = {
        "net.core.bpf_jit_harden" = "1"
      }
      nodeLabels = {
        "forest.dev/accelerator-vendor" = "nvidia"
      }
    }
  }

  # Explicit GPU Operator values. The driver and the container toolkit are disabled because the Talos
  # system extensions (nonfree-kmod-nvidia, nvidia-container-toolkit) provide them; an operator-built
  # driver cannot load on Talos' read-only, signed-module kernel.
  gpu_operator_values = {
    driver       = { enabled = false }
    toolkit      = { enabled = false }
    devicePlugin = { enabled = true }
    # GPU Feature Discovery labels are what Forest's NVIDIA inventory is assembled from.
    gfd          = { enabled = true }
    nfd          = { enabled = true }
    migManager   = { enabled = false }
    dcgmExporter = { enabled = false }
    operator     = { runtimeClass = "nvidia" }
  }
}
