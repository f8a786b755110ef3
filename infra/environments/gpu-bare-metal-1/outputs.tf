output "guarded_hostname" {
  description = "The host this plan ran on (exists only when the host guard passed)."
  value       = module.host_guard.hostname
}

output "kubeconfig" {
  description = "Admin kubeconfig of the GPU Grove."
  value       = module.grove.kubeconfig
  sensitive   = true
}

output "talosconfig" {
  description = "talosctl configuration of the GPU Grove."
  value       = module.grove.talosconfig
  sensitive   = true
}

output "gpu_worker_addresses" {
  description = "Mesh address of each GPU worker."
  value       = module.grove.gpu_worker_addresses
}
