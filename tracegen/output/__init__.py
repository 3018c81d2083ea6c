"""The output-folder guard every command that writes goes through: where it writes and whether
it may (place), a folder written whole (folder), files put one by one into a folder of ours
(put), what in a folder tracegen wrote (ownership), locks, signals and refused writes (guard).
May import: config and the shared modules. Must not import the pipeline's stages, emit,
corpus or cli.
"""
