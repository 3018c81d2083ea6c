"""The output-folder guard every command that writes goes through: where it writes (folder),
what in a folder tracegen wrote (ownership), locks, signals and refused writes (guard).
May import: config and the shared modules. Must not import the pipeline's stages, emit,
corpus or cli.
"""
