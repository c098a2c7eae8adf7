"""`python -m gpuhealth.cli …`, as the `gpuhealth` script."""

from gpuhealth.cli import main

main()
