"""Griffe extension for the Python API page (mkdocs.yml): a docstring that opens with
`Args:` on its first line (`\"\"\"Args:`), its items then at the docstring's own indentation,
is read as the Google-style section it means, its items indented under the heading."""

from __future__ import annotations

from typing import Any

import griffe


class ArgsOnTheFirstLine(griffe.Extension):
    def on_function_instance(self, *, node: Any, func: griffe.Function, **kwargs: Any) -> None:
        docstring = func.docstring
        if docstring is None or not docstring.value.startswith("Args:\n"):
            return
        heading, _, items = docstring.value.partition("\n")
        docstring.value = (
            heading
            + "\n"
            + "\n".join(f"    {line}" if line.strip() else line for line in items.splitlines())
        )
