"""The alerting and recording rules, one module per thing they watch; alerts/rules.py lists them in order."""
