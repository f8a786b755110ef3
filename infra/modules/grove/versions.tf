terraform {
  required_version = ">= 1.8"

  # Lower bounds a module needs; environments pin exact versions. Provider configuration (the
  # Kubernetes and Helm credentials come from this module's outputs) belongs to the environment.
  required_providers {
    talos = {
      source  = "siderolabs/talos"
      version = ">= 0.8.0, < 1.0.0"
    }
    libvirt = {
      source  = "dmacvicar/libvirt"
      version = ">= 0.8.1, < 0.9.0"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.36.0, < 3.0.0"
    }
    helm = {
      source  = "hashicorp/helm"
      version = ">= 3.0.0, < 4.0.0"
    }
  }
}
