"""Predictor: features, risk model (ECC/thermal/PCIe heads), RMA rules, decision policy."""
