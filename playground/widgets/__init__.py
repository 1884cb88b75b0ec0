"""The window's widgets: they lay out and render; the controller wires them to the worker."""
