"""Acting on the cluster: desired and observed node states, the steps between, and the schedulers' clients."""
