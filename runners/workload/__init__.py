"""Workloads: dataset loaders, the synthetic stand-ins, mixing, arrival processes and SLOs."""
