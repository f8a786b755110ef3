# The guard is an output precondition rather than a resource so it leaves nothing in state and never
# shows up as a planned create that the apply policy would have to allow.
output "hostname" {
  description = "The hostname this configuration was evaluated on; a value only exists when it is the expected host."
  value       = local.observed_hostname

  precondition {
    condition     = local.host_matches
    error_message = "infra.wrong_host: environment ${var.environment} is inert on this machine: ${var.hostname_file} names ${local.observed_hostname == "" ? "no host" : local.observed_hostname}, but only ${var.expected_hostname} may plan or apply it. Activation steps are in infra/README.md."
  }
}
