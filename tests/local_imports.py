"""Which function-local imports of a module do not say why (shared by the library's and the pipeline's layering
tests): an import inside a function is for a heavy optional dependency or a start-up cost (torch, mlflow,
matplotlib, the Dagster definitions), and says so with `# why:` on its line or on a comment line right above its
block of imports."""

from __future__ import annotations

import ast

WHY = "# why:"


def package_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, imported sub-package or root module of ``package``) of every absolute import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, n.split(".")[1]) for n in names if n.startswith(f"{package}.")]
    return found


def unexplained_local_imports(source: str) -> list[int]:
    """The lines of ``source``'s function-local imports with no `# why:` on the line, nor on a comment line right above
    its block of imports (a run of import lines and blank lines)."""
    lines = source.splitlines()
    tree = ast.parse(source)
    inner = {
        n.lineno
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
        if isinstance(n, (ast.Import, ast.ImportFrom))
    }
    import_lines = {
        line
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for line in range(n.lineno, (n.end_lineno or n.lineno) + 1)  # ast.parse sets end_lineno
    }

    def says_why(line: int) -> bool:
        if WHY in lines[line - 1]:
            return True
        above = line - 1
        while above >= 1 and (above in import_lines or not lines[above - 1].strip()):
            if WHY in lines[above - 1]:
                return True
            above -= 1
        return above >= 1 and lines[above - 1].strip().startswith(WHY)

    return sorted(line for line in inner if not says_why(line))
