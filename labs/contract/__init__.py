"""The OpenAI-contract check: python -m labs.contract."""
