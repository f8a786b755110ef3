variable "environment" {
  description = "Name of the environment this guard protects; used only in the refusal message."
  type        = string
  default     = null

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,62}$", var.environment))
    error_message = "environment must be the environment folder's name: lowercase letters, digits and dashes (for example gpu-bare-metal-1)."
  }
}

variable "expected_hostname" {
  description = "The only host allowed to plan or apply the environment. Must equal the host in the environment's infra/policy/apply-policy.yaml row."
  type        = string
  default     = null

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$", var.expected_hostname))
    error_message = "expected_hostname must be a lowercase hostname (RFC 1123), for example gpu-host-unassigned; set it to the machine named in infra/policy/apply-policy.yaml."
  }
}

variable "hostname_file" {
  description = "File whose first line names this machine. Tests point it at a temporary file; real plans keep the default."
  type        = string
  default     = "/etc/hostname"

  validation {
    condition     = startswith(var.hostname_file, "/")
    error_message = "hostname_file must be an absolute path, for example /etc/hostname, so the guard reads the same file whatever the working directory."
  }
}
