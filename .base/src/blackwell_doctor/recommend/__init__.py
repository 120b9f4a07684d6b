"""recommend: findings → ordered actions and a runtime launch derived from the facts.

``catalogue`` (checks/runtimes.toml), ``settings`` (derivations), ``launch`` (the container
as one value), ``plan`` (actions), ``render`` (markdown, json, shell, compose).
"""
