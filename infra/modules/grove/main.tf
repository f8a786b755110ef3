locals {
  create = var.create

  control_planes = local.create ? { for node in var.control_planes : node.name => node } : {}
  workers        = local.create ? { for node in var.workers : node.name => node } : {}
  vm_nodes       = merge(local.control_planes, local.workers)

  bootstrap_address = try(var.control_planes[0].address, null)
  cluster_endpoint  = var.cluster_endpoint != "" ? var.cluster_endpoint : "https://${coalesce(local.bootstrap_address, "unset")}:6443"

  # The Image Factory's schematic without extensions; ordinary VMs need nothing else.
  vanilla_schematic_id = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
  talos_vm_image_url   = var.talos_vm_image_url != "" ? var.talos_vm_image_url : "https://${var.image_factory_host}/image/${local.vanilla_schematic_id}/${var.talos_version}/metal-amd64.qcow2"

  # infra/modules/grove -> the repository root -> charts/forest-controller
  controller_chart_path = var.controller_chart_path != "" ? var.controller_chart_path : abspath("${path.module}/../../../charts/forest-controller")
}

# Everything derived from inputs (controller ConfigMap, deploy trigger, GPU patches, GPU Operator values)
# lives in a provider-free submodule so a real engine can evaluate it offline in tests.
module "config" {
  source = "./modules/config"

  name                      = var.name
  talos_version             = var.talos_version
  host_url                  = var.host_url
  controller_log_level      = var.controller_log_level
  controller_extra_config   = var.controller_extra_config
  accelerators_enabled      = var.accelerators_enabled
  nvidia_talos_schematic_id = var.nvidia_talos_schematic_id
  image_factory_host        = var.image_factory_host
  gpu_worker_count          = length(var.gpu_workers)
  controller_chart_path     = local.controller_chart_path
  controller_chart_version  = var.controller_chart_version
}

################################################################################
# VMs
################################################################################

resource "libvirt_volume" "talos_base" {
  count = local.create && length(local.vm_nodes) > 0 ? 1 : 0

  name   = "${var.name}-talos-${var.talos_version}.qcow2"
  pool   = var.libvirt_pool
  source = local.talos_vm_image_url
  format = "qcow2"
}

resource "libvirt_volume" "node" {
  for_each = local.vm_nodes

  name           = "${var.name}-${each.key}.qcow2"
  pool           = var.libvirt_pool
  base_volume_id = libvirt_volume.talos_base[0].id
  size           = each.value.disk_bytes
}

resource "libvirt_domain" "node" {
  for_each = local.vm_nodes

  name   = "${var.name}-${each.key}"
  vcpu   = each.value.vcpu
  memory = each.value.memory_mib

  cpu {
    mode = "host-passthrough"
  }

  disk {
    volume_id = libvirt_volume.node[each.key].id
  }

  network_interface {
    network_name = var.libvirt_network
    hostname     = each.key
    addresses    = [each.value.address]
    # Talos answers on its API port, not through a guest agent; the address is a DHCP reservation.
    wait_for_lease = false
  }

  console {
    type        = "pty"
    target_type = "serial"
    target_port = "0"
  }
}

################################################################################
# Talos
################################################################################

resource "talos_machine_secrets" "this" {
  count = local.create ? 1 : 0

  talos_version = var.talos_version

  lifecycle {
    precondition {
      condition     = length(var.control_planes) > 0
      error_message = "control_planes is empty: a Grove needs at least one control-plane VM (name and address)."
    }
  }
}

data "talos_machine_configuration" "control_plane" {
  count = local.create ? 1 : 0

  cluster_name       = var.name
  cluster_endpoint   = local.cluster_endpoint
  machine_type       = "controlplane"
  machine_secrets    = talos_machine_secrets.this[0].machine_secrets
  talos_version      = var.talos_version
  kubernetes_version = var.kubernetes_version
  docs               = false
  examples           = false
}

data "talos_machine_configuration" "worker" {
  count = local.create ? 1 : 0

  cluster_name       = var.name
  cluster_endpoint   = local.cluster_endpoint
  machine_type       = "worker"
  machine_secrets    = talos_machine_secrets.this[0].machine_secrets
  talos_version      = var.talos_version
  kubernetes_version = var.kubernetes_version
  docs               = false
  examples           = false
}

resource "talos_machine_configuration_apply" "control_plane" {
  for_each = local.control_planes

  client_configuration        = talos_machine_secrets.this[0].client_configuration
  machine_configuration_input = data.talos_machine_configuration.control_plane[0].machine_configuration
  node                        = each.value.address
  config_patches = [yamlencode({
    machine = {
      network = { hostname = each.key }
      install = { disk = each.value.install_disk }
    }
  })]

  depends_on = [libvirt_domain.node]
}

resource "talos_machine_configuration_apply" "worker" {
  for_each = local.workers

  client_configuration        = talos_machine_secrets.this[0].client_configuration
  machine_configuration_input = data.talos_machine_configuration.worker[0].machine_configuration
  node                        = each.value.address
  config_patches = [yamlencode({
    machine = {
      network = { hostname = each.key }
      install = { disk = each.value.install_disk }
    }
  })]

  depends_on = [libvirt_domain.node]
}

resource "talos_machine_bootstrap" "this" {
  count = local.create ? 1 : 0

  client_configuration = talos_machine_secrets.this[0].client_configuration
  node                 = local.bootstrap_address

  depends_on = [talos_machine_configuration_apply.control_plane]
}

resource "talos_cluster_kubeconfig" "this" {
  count = local.create ? 1 : 0

  client_configuration = talos_machine_secrets.this[0].client_configuration
  node                 = local.bootstrap_address

  depends_on = [talos_machine_bootstrap.this]
}

data "talos_client_configuration" "this" {
  count = local.create ? 1 : 0

  cluster_name         = var.name
  client_configuration = talos_machine_secrets.this[0].client_configuration
  endpoints            = [for node in local.control_planes : node.address]
  nodes = concat(
    [for node in local.vm_nodes : node.address],
    [for node in local.gpu_workers : node.mesh_address],
  )
}
