################################################################################
# Grove
################################################################################

variable "create" {
  description = "Whether to create anything at all (the terraform-aws-modules switch)."
  type        = bool
  default     = true
}

variable "name" {
  description = "Grove name; becomes the Talos cluster name, the VM name prefix and the controller's grove.name."
  type        = string
  default     = "grove"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$", var.name))
    error_message = "name must be a DNS label of at most 40 characters: lowercase letters, digits and inner dashes."
  }
}

variable "talos_version" {
  description = "Talos release every node runs, as vX.Y.Z. The NVIDIA extensions in the GPU schematic are built for one Talos release; keep them in step."
  type        = string
  default     = "v1.9.5"

  validation {
    condition     = can(regex("^v[0-9]+\\.[0-9]+\\.[0-9]+$", var.talos_version))
    error_message = "talos_version must look like v1.9.5 (a Talos release tag)."
  }
}

variable "kubernetes_version" {
  description = "Kubernetes version Talos installs, as X.Y.Z."
  type        = string
  default     = "1.32.3"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.kubernetes_version))
    error_message = "kubernetes_version must look like 1.32.3 (no leading v)."
  }
}

variable "cluster_endpoint" {
  description = "Kubernetes API endpoint. Empty: https://<first control plane address>:6443."
  type        = string
  default     = ""

  validation {
    condition     = var.cluster_endpoint == "" || can(regex("^https://[^/\\s]+:[0-9]+$", var.cluster_endpoint))
    error_message = "cluster_endpoint must be empty or https://HOST:PORT, for example https://10.20.0.10:6443."
  }
}

################################################################################
# Nodes created as VMs (libvirt)
################################################################################

variable "control_planes" {
  description = "Control-plane VMs. address is the static address the VM gets from the libvirt network and Talos is configured on."
  type = list(object({
    name         = string
    address      = string
    vcpu         = optional(number, 2)
    memory_mib   = optional(number, 4096)
    disk_bytes   = optional(number, 21474836480)
    install_disk = optional(string, "/dev/vda")
  }))
  default = []

  validation {
    condition     = length(var.control_planes) == 0 || length(var.control_planes) % 2 == 1
    error_message = "control_planes must hold an odd number of nodes (1, 3, 5) so etcd keeps quorum."
  }

  validation {
    condition     = alltrue([for node in var.control_planes : can(cidrhost("${node.address}/32", 0))])
    error_message = "Every control_planes[*].address must be an IPv4 address, for example 10.20.0.10."
  }

  validation {
    condition     = alltrue([for node in var.control_planes : can(regex("^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$", node.name))])
    error_message = "Every control_planes[*].name must be a short DNS label (lowercase letters, digits, inner dashes)."
  }
}

variable "workers" {
  description = "Ordinary (non-GPU) worker VMs, same shape as control_planes."
  type = list(object({
    name         = string
    address      = string
    vcpu         = optional(number, 4)
    memory_mib   = optional(number, 8192)
    disk_bytes   = optional(number, 42949672960)
    install_disk = optional(string, "/dev/vda")
  }))
  default = []

  validation {
    condition     = alltrue([for node in var.workers : can(cidrhost("${node.address}/32", 0))])
    error_message = "Every workers[*].address must be an IPv4 address, for example 10.20.0.20."
  }

  validation {
    condition     = alltrue([for node in var.workers : can(regex("^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$", node.name))])
    error_message = "Every workers[*].name must be a short DNS label (lowercase letters, digits, inner dashes)."
  }
}

variable "libvirt_pool" {
  description = "libvirt storage pool for the Talos base image and the VM disks."
  type        = string
  default     = "default"

  validation {
    condition     = length(var.libvirt_pool) > 0
    error_message = "libvirt_pool must name an existing libvirt storage pool (virsh pool-list)."
  }
}

variable "libvirt_network" {
  description = "libvirt network the VMs attach to; it must be libvirt-managed so the static addresses become DHCP reservations."
  type        = string
  default     = "default"

  validation {
    condition     = length(var.libvirt_network) > 0
    error_message = "libvirt_network must name an existing libvirt network (virsh net-list)."
  }
}

variable "talos_vm_image_url" {
  description = "Talos disk image (qcow2) the VMs boot from. Empty: the Image Factory's vanilla metal image for talos_version."
  type        = string
  default     = ""

  validation {
    condition     = var.talos_vm_image_url == "" || can(regex("^(https://|file:///)", var.talos_vm_image_url))
    error_message = "talos_vm_image_url must be empty, an https:// URL or a file:/// path to a qcow2 Talos image."
  }
}

################################################################################
# forest-controller
################################################################################

variable "host_url" {
  description = "Forest Host base URL the controller reports to."
  type        = string
  default     = "https://forest.invalid"

  validation {
    condition     = can(regex("^https://[^/\\s]+", var.host_url))
    error_message = "host_url must be an https:// URL, for example https://forest.example.com."
  }
}

variable "controller_namespace" {
  description = "Namespace forest-controller runs in."
  type        = string
  default     = "forest-system"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.controller_namespace))
    error_message = "controller_namespace must be a Kubernetes namespace name (DNS label)."
  }
}

variable "controller_chart_path" {
  description = "Directory of the forest-controller chart. Empty: charts/forest-controller of this repository, the chart this module is tested with."
  type        = string
  default     = ""

  validation {
    condition     = var.controller_chart_path == "" || can(regex("^[^\\s]+$", var.controller_chart_path))
    error_message = "controller_chart_path must be empty (the chart in this repository) or a directory path without spaces."
  }
}

variable "controller_chart_version" {
  description = "forest-controller chart version this Grove expects; the plan fails unless the chart at controller_chart_path has exactly this version in its Chart.yaml."
  type        = string
  default     = "0.1.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+", var.controller_chart_version))
    error_message = "controller_chart_version must be a semantic version, for example 0.1.0."
  }
}

variable "controller_image" {
  description = "forest-controller image reference (repository:tag or repository@sha256:...)."
  type        = string
  default     = "registry.invalid/forest/forest-controller:0.1.0"

  validation {
    condition     = can(regex("^[^\\s:@]+([:@][^\\s]+)$", var.controller_image))
    error_message = "controller_image must be an image reference with a tag or digest, for example registry.example.com/forest/forest-controller:0.1.0."
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
  description = "Extra forest-controller ConfigMap keys. accelerators.* keys are refused: accelerators_enabled owns them."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for key in keys(var.controller_extra_config) : !startswith(key, "accelerators.")])
    error_message = "controller_extra_config must not set accelerators.* keys; set accelerators_enabled = true instead, so ordinary Groves never carry them."
  }
}

variable "controller_enrollment_token" {
  description = "One-time Grove enrollment token issued by Forest Host; stored in a Secret the controller reads once."
  type        = string
  default     = ""
  sensitive   = true

  validation {
    condition     = var.controller_enrollment_token == "" || length(var.controller_enrollment_token) >= 20
    error_message = "controller_enrollment_token must be empty (enroll later) or the full token Forest Host issued (at least 20 characters)."
  }
}

################################################################################
# Accelerators (opt-in; see accelerators.tf)
################################################################################

variable "accelerators_enabled" {
  description = "Opt in to NVIDIA accelerators. Off (the default): no GPU Operator, no RuntimeClass, no GPU node patches, no GPU workers, and no accelerator keys in the controller ConfigMap or its deploy trigger."
  type        = bool
  default     = false
}

variable "nvidia_talos_schematic_id" {
  description = "Talos Image Factory schematic id whose image carries the NVIDIA system extensions (nonfree-kmod-nvidia, nvidia-container-toolkit). Required when accelerators_enabled is true."
  type        = string
  default     = ""

  validation {
    condition     = var.nvidia_talos_schematic_id == "" || can(regex("^[0-9a-f]{64}$", var.nvidia_talos_schematic_id))
    error_message = "nvidia_talos_schematic_id must be the 64-character lowercase hex id the Talos Image Factory returned for the NVIDIA schematic (see infra/README.md, Activation)."
  }
}

variable "image_factory_host" {
  description = "Talos Image Factory host serving the GPU worker's installer image."
  type        = string
  default     = "factory.talos.dev"

  validation {
    condition     = can(regex("^[a-z0-9.-]+(:[0-9]+)?$", var.image_factory_host))
    error_message = "image_factory_host must be a bare registry host (optionally :port), for example factory.talos.dev."
  }
}

variable "gpu_workers" {
  description = "External bare-metal GPU workers, joined by their mesh (WireGuard) address instead of being created as VMs. Talos must already be booted on them from the NVIDIA schematic's image, in maintenance mode."
  type = list(object({
    name         = string
    mesh_address = string
    install_disk = optional(string, "/dev/nvme0n1")
  }))
  default = []

  validation {
    condition     = alltrue([for node in var.gpu_workers : can(cidrhost("${node.mesh_address}/32", 0))])
    error_message = "Every gpu_workers[*].mesh_address must be the worker's IPv4 address on the mesh, for example 10.99.0.21."
  }

  validation {
    condition     = alltrue([for node in var.gpu_workers : can(regex("^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$", node.name))])
    error_message = "Every gpu_workers[*].name must be a short DNS label (lowercase letters, digits, inner dashes)."
  }

  validation {
    condition     = alltrue([for node in var.gpu_workers : startswith(node.install_disk, "/dev/")])
    error_message = "Every gpu_workers[*].install_disk must be a device path such as /dev/nvme0n1; check it with talosctl get disks --insecure."
  }
}

variable "gpu_operator_namespace" {
  description = "Namespace for the NVIDIA GPU Operator; labelled privileged because Talos enforces baseline Pod Security by default."
  type        = string
  default     = "gpu-operator"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.gpu_operator_namespace))
    error_message = "gpu_operator_namespace must be a Kubernetes namespace name (DNS label)."
  }
}

variable "gpu_operator_chart_version" {
  description = "NVIDIA GPU Operator chart version (helm.ngc.nvidia.com/nvidia)."
  type        = string
  default     = "v24.9.2"

  validation {
    condition     = can(regex("^v?[0-9]+\\.[0-9]+\\.[0-9]+$", var.gpu_operator_chart_version))
    error_message = "gpu_operator_chart_version must be a chart version such as v24.9.2."
  }
}
