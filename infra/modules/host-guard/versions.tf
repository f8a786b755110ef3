terraform {
  # No providers on purpose: the guard must evaluate on any machine, including one that cannot
  # download providers, so a plan on the wrong host fails with the guard's message.
  required_version = ">= 1.8"
}
