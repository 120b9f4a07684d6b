"""A whole fleet at once: every node's facts judged by the same evaluation as ``check``
(:func:`blackwell_doctor.evaluate.evaluate`), then grouped by finding."""
