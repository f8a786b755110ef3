variable "expected_hostname" {
  description = "The only machine allowed to plan this environment. Must equal the host of its row in infra/policy/apply-policy.yaml; gpu-host-unassigned names no real machine, which keeps the environment inert."
  type        = string
  default     = "gpu-host-unassigned"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$", var.expected_hostname))
    error_message = "expected_hostname must be a lowercase hostname; change it only together with the apply-policy row (infra/README.md, Activation)."
  }
}

variable "hostname_file" {
  description = "File naming this machine, read by the host guard. Only tests change it."
  type        = string
  default     = "/etc/hostname"

  validation {
    condition     = startswith(var.hostname_file, "/")
    error_message = "hostname_file must be an absolute path such as /etc/hostname."
  }
}

variable "libvirt_uri" {
  description = "libvirt connection for the control-plane VM, for example qemu+ssh://forest@vm-host/system."
  type        = string
  default     = "qemu:///system"

  validation {
    condition     = can(regex("^qemu(\\+[a-z]+)?://", var.libvirt_uri))
    error_message = "libvirt_uri must be a qemu URI such as qemu:///system or qemu+ssh://user@host/system."
  }
}

variable "control_plane_address" {
  description = "Static address of the control-plane VM on the libvirt network; unassigned until activation."
  type        = string
  default     = ""

  validation {
    condition     = var.control_plane_address == "" || can(cidrhost("${var.control_plane_address}/32", 0))
    error_message = "control_plane_address must be an IPv4 address such as 10.20.0.10 (empty only while unassigned)."
  }
}

variable "gpu_worker_mesh_address" {
  description = "The bare-metal NVIDIA worker's address on the WireGuard mesh; unassigned until activation."
  type        = string
  default     = ""

  validation {
    condition     = var.gpu_worker_mesh_address == "" || can(cidrhost("${var.gpu_worker_mesh_address}/32", 0))
    error_message = "gpu_worker_mesh_address must be an IPv4 address on the mesh such as 10.99.0.21 (empty only while unassigned)."
  }
}

variable "gpu_worker_install_disk" {
  description = "Install disk of the bare-metal worker as Talos sees it (talosctl get disks --insecure)."
  type        = string
  default     = "/dev/nvme0n1"

  validation {
    condition     = startswith(var.gpu_worker_install_disk, "/dev/")
    error_message = "gpu_worker_install_disk must be a device path such as /dev/nvme0n1."
  }
}

variable "nvidia_talos_schematic_id" {
  description = "Talos Image Factory schematic id with the NVIDIA extensions; unassigned until activation."
  type        = string
  default     = ""

  validation {
    condition     = var.nvidia_talos_schematic_id == "" || can(regex("^[0-9a-f]{64}$", var.nvidia_talos_schematic_id))
    error_message = "nvidia_talos_schematic_id must be the 64-character hex id returned by the Talos Image Factory."
  }
}

variable "host_url" {
  description = "Forest Host URL the controller reports to."
  type        = string
  default     = "https://forest.invalid"

  validation {
    condition     = can(regex("^https://[^/\\s]+", var.host_url))
    error_message = "host_url must be an https:// URL."
  }
}
