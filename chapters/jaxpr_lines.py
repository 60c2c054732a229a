"""The equations of a jaxpr that call given primitives, each on one line.

JAX's printer breaks an equation whose parameters are long over several
lines; a chapter that shows one equation shows it whole.
"""


def equation_lines(jaxpr, name):
    """The equations of `jaxpr` (nested ones too) whose text holds `name`,
    each with its continuation lines joined to it."""
    found, current, depth = [], None, 0
    for line in str(jaxpr).splitlines():
        text = line.strip()
        if current is None and name in text:
            current, depth = text, 0
        elif current is not None:
            joined = current.endswith("[") or text.startswith("]")
            current += ("" if joined else " ") + text
        else:
            continue
        depth += text.count("[") - text.count("]")
        if depth <= 0:
            found.append(current)
            current = None
    return found
