locals {
  # try(): a missing or unreadable file (macOS has no /etc/hostname) reads as "no hostname", which
  # never matches, instead of surfacing as an unrelated file() error.
  observed_hostname = try(lower(trimspace(file(var.hostname_file))), "")
  host_matches      = local.observed_hostname == var.expected_hostname
}
