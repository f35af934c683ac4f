"""An example schedlab scheduler package (examples/shortest_prompt_package): shortest prompt first."""
