"""Fleet simulator: GPU models, workloads, thermal physics, fault modes and failure labels."""
