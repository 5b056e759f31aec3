"""Running items: the runtime caches and the item runner, the estimate, `kgbench validate`,
rescoring a stored run and importing outside results, and turning options into settings
(`config`). Above agents, below the plugin and the CLI.
"""
