output "create_accelerators" {
  description = "Whether the Grove plans its accelerator resources. Every GPU-only resource in the Grove module counts on this."
  value       = var.accelerators_enabled

  # Preconditions, not validation blocks: validations that read another variable need OpenTofu >= 1.10
  # (Terraform >= 1.9), and this module supports OpenTofu >= 1.8.
  precondition {
    condition     = !var.accelerators_enabled || var.nvidia_talos_schematic_id != ""
    error_message = "nvidia_talos_schematic_id is required when accelerators_enabled is true: create a Talos Image Factory schematic with the NVIDIA extensions and pass its id (infra/README.md, Activation)."
  }

  precondition {
    condition     = var.accelerators_enabled || var.gpu_worker_count == 0
    error_message = "gpu_workers are declared but accelerators_enabled is false: set accelerators_enabled = true, or remove the GPU workers."
  }
}

output "controller_chart_path" {
  description = "Directory of the forest-controller chart, checked (unless empty): it holds a chart named forest-controller whose version is controller_chart_version."
  value       = var.controller_chart_path

  precondition {
    condition     = var.controller_chart_path == "" || local.controller_chart_found
    error_message = "controller_chart_path holds no Chart.yaml: point it at charts/forest-controller of this repository (or leave it empty in the Grove module)."
  }

  precondition {
    condition     = var.controller_chart_path == "" || local.controller_chart_name == "forest-controller"
    error_message = "The chart at controller_chart_path is not named forest-controller."
  }

  precondition {
    condition     = var.controller_chart_path == "" || local.controller_chart_version == var.controller_chart_version
    error_message = "infra.chart_version_mismatch: the forest-controller chart in this repository has version ${local.controller_chart_version} but controller_chart_version pins ${var.controller_chart_version}; bump one to match the other."
  }
}

output "controller_config" {
  description = "forest-controller ConfigMap data."
  value       = local.controller_config
}

output "controller_config_sha256" {
  description = "Deploy trigger: sha256 of the controller ConfigMap data; the controller's pods roll when it changes."
  value       = local.controller_config_sha256
}

output "gpu_worker_config_patches" {
  description = "Talos machine-config patches (YAML) every GPU worker gets; empty without accelerators."
  value       = var.accelerators_enabled ? [yamlencode(local.gpu_worker_config_patch)] : []
}

output "gpu_operator_values" {
  description = "GPU Operator Helm values (YAML); null without accelerators."
  value       = var.accelerators_enabled ? yamlencode(local.gpu_operator_values) : null
}

output "runtime_class_name" {
  description = "Name of the RuntimeClass GPU pods use; null without accelerators."
  value       = var.accelerators_enabled ? "nvidia" : null
}
