"""Workloads: desired native workloads, the generation writer that turns a change into a new
generation for the agent, and the observed state agents report for each generation."""
