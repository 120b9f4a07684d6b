"""apply: carry out a launch spec through the Docker API, with a plan first and rollback.

``state`` compares the running container with the spec (read-only); ``run`` plans, applies
(pull, create with GPUs, swap, start, health, log scan) and rolls back.
"""
