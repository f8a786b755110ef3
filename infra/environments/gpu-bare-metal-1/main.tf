locals {
  environment = "gpu-bare-metal-1"
}

# Inert by construction: this guard fails every plan unless /etc/hostname names expected_hostname,
# which defaults to a host that does not exist. It needs no provider, so it fails even where nothing
# else could be evaluated.
module "host_guard" {
  source = "../../modules/host-guard"

  environment       = local.environment
  expected_hostname = var.expected_hostname
  hostname_file     = var.hostname_file
}

# One control-plane VM and one bare-metal NVIDIA worker joined over the mesh.
module "grove" {
  source = "../../modules/grove"

  # Every resource of the Grove depends on the guard, so `plan/apply -target=module.grove...` pulls the
  # guard into the graph and fails on the wrong host too (a targeted run otherwise skips it).
  depends_on = [module.host_guard]

  name          = local.environment
  talos_version = "v1.9.5"
  host_url      = var.host_url

  control_planes = [{
    name    = "cp-0"
    address = var.control_plane_address
  }]

  accelerators_enabled      = true
  nvidia_talos_schematic_id = var.nvidia_talos_schematic_id
  gpu_workers = [{
    name         = "gpu-0"
    mesh_address = var.gpu_worker_mesh_address
    install_disk = var.gpu_worker_install_disk
  }]
}
