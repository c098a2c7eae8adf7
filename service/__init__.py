"""The service layer: the long-running loops of `gpuhealth serve` (ingest buffer, scorer,
Prometheus puller) and their assembly; below the HTTP layer, above the components."""
