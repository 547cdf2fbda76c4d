"""Which transformer classes the pack supports and where their blocks are: one declarative registry
(``registry``: every family fact, the node scopes, resolving a module to its entry)."""
