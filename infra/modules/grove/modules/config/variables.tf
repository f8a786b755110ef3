variable "name" {
  description = "Grove name; becomes the Talos cluster name and the controller's grove.name."
  type        = string
  default     = "grove"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$", var.name))
    error_message = "name must be a DNS label of at most 40 characters: lowercase letters, digits and inner dashes."
  }
}

variable "talos_version" {
  description = "Talos release the nodes run, as vX.Y.Z; also selects the GPU worker's installer image tag."
  type        = string
  default     = "v1.9.5"

  validation {
    condition     = can(regex("^v[0-9]+\\.[0-9]+\\.[0-9]+$", var.talos_version))
    error_message = "talos_version must look like v1.9.5 (a Talos release tag)."
  }
}

variable "host_url" {
  description = "Forest Host base URL the controller reports to."
  type        = string
  default     = "https://forest.invalid"

  validation {
    condition     = can(regex("^https://[^/\\s]+", var.host_url))
    error_message = "host_url must be an https:// URL, for example https://forest.example.com."
  }
}

variable "controller_log_level" {
  description = "forest-controller log level."
  type        = string
  default     = "info"

  validation {
    condition     = contains(["debug", "info", "warning", "error"], var.controller_log_level)
    error_message = "controller_log_level must be one of debug, info, warning, error."
  }
}

variable "controller_extra_config" {
  description = "Extra forest-controller ConfigMap keys. Accelerator keys are owned by accelerators_enabled and are refused here."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for key in keys(var.controller_extra_config) : !startswith(key, "accelerators.")])
    error_message = "controller_extra_config must not set accelerators.* keys; set accelerators_enabled = true instead, so ordinary Groves never carry them."
  }
}

variable "accelerators_enabled" {
  description = "Opt in to NVIDIA accelerators. Off: no GPU Operator, RuntimeClass, GPU node patches or accelerator controller keys."
  type        = bool
  default     = false
}

variable "nvidia_talos_schematic_id" {
  description = "Talos Image Factory schematic id with the NVIDIA system extensions; required when accelerators_enabled is true."
  type        = string
  default     = ""

  validation {
    condition     = var.nvidia_talos_schematic_id == "" || can(regex("^[0-9a-f]{64}$", var.nvidia_talos_schematic_id))
    error_message = "nvidia_talos_schematic_id must be the 64-character lowercase hex id the Talos Image Factory returned for the NVIDIA schematic (see infra/README.md, Activation)."
  }
}

variable "image_factory_host" {
  description = "Talos Image Factory host that serves installer images for a schematic."
  type        = string
  default     = "factory.talos.dev"

  validation {
    condition     = can(regex("^[a-z0-9.-]+(:[0-9]+)?$", var.image_factory_host))
    error_message = "image_factory_host must be a bare registry host (optionally :port), for example factory.talos.dev."
  }
}

variable "controller_chart_path" {
  description = "Directory of the forest-controller chart the Grove installs."
  type        = string
  default     = ""

  validation {
    condition     = var.controller_chart_path == "" || can(regex("^[^\\s]+$", var.controller_chart_path))
    error_message = "controller_chart_path must be a directory path without spaces (empty: no chart is checked)."
  }
}

variable "controller_chart_version" {
  description = "The chart version the Grove expects; must equal the version in the chart's Chart.yaml."
  type        = string
  default     = "0.1.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+", var.controller_chart_version))
    error_message = "controller_chart_version must be a semantic version, for example 0.1.0."
  }
}

variable "gpu_worker_count" {
  description = "How many external GPU workers the Grove declares; only used to refuse GPU workers on a Grove without accelerators."
  type        = number
  default     = 0

  validation {
    condition     = var.gpu_worker_count >= 0 && floor(var.gpu_worker_count) == var.gpu_worker_count
    error_message = "gpu_worker_count must be a whole number, zero or more."
  }
}
