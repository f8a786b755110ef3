terraform {
  required_version = ">= 1.8"

  # No backend block: this environment has no state-authority entry (infra/policy/state-authority.yaml),
  # so no machine holds its state. Activation adds the backend that entry names.

  required_providers {
    talos = {
      source  = "siderolabs/talos"
      version = "0.8.1"
    }
    libvirt = {
      source  = "dmacvicar/libvirt"
      version = "0.8.3"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "2.36.0"
    }
    helm = {
      source  = "hashicorp/helm"
      version = "3.0.2"
    }
  }
}

provider "talos" {}

provider "libvirt" {
  uri = var.libvirt_uri
}

# The Grove's own kubeconfig configures these; before bootstrap the values are unknown and the
# providers only plan (namespaces, ConfigMaps and releases need no API call to plan).
provider "kubernetes" {
  host                   = try(module.grove.kubernetes_client_configuration.host, null)
  cluster_ca_certificate = try(base64decode(module.grove.kubernetes_client_configuration.ca_certificate), null)
  client_certificate     = try(base64decode(module.grove.kubernetes_client_configuration.client_certificate), null)
  client_key             = try(base64decode(module.grove.kubernetes_client_configuration.client_key), null)
}

provider "helm" {
  kubernetes = {
    host                   = try(module.grove.kubernetes_client_configuration.host, null)
    cluster_ca_certificate = try(base64decode(module.grove.kubernetes_client_configuration.ca_certificate), null)
    client_certificate     = try(base64decode(module.grove.kubernetes_client_configuration.client_certificate), null)
    client_key             = try(base64decode(module.grove.kubernetes_client_configuration.client_key), null)
  }
}
