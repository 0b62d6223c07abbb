"""The body of each ``zoo`` command, one module per command (or per pair that share their code):
:mod:`zoo.cli` is the table that names them. Every command that takes a checkpoint loads it with
:func:`zoo.loading.load_model` or :func:`zoo.loading.load_task`."""
