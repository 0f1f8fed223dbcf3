"""The evaluation report: each metric's distribution and its roll-ups per app and
per agent, as PNG images and one standalone HTML file. `model` is the pure part,
`draw` the pictures (matplotlib, imported only here), `html` the page, `build` the
reading and writing."""
