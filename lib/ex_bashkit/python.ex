defmodule ExBashkit.Python do
  @moduledoc """
  The sandboxed `python` builtin a session gets with the `:python` option.

      iex> session = ExBashkit.Session.new(python: true)
      iex> {:ok, result} = ExBashkit.Session.exec(session, ~S{python3 -c 'print(sum(range(10)))'})
      iex> result.stdout
      "45\\n"

  It is the Python interpreter compiled into bashkit (Monty, an
  implementation of a Python subset written in Rust): it runs inside the
  BEAM's OS process, on the library's interpreter threads, with no extra
  dependency to install. There is no CPython, no subprocess and no host
  Python involved. This module holds only this documentation.

  ## Enabling it

    * `python: true` registers the command as `python` and `python3`;
    * `python: [name: "py"]` registers it under that one name only;
    * `python: [names: ["py", "python3"]]` under each of these names.

  Without the option, `python3` is an unknown command (exit code 127).

  bashkit keeps in-process Python switched off unless the interpreter was
  built with `BASHKIT_ALLOW_INPROCESS_PYTHON=1` in its environment; the
  session does that for you and then removes the variable from the shell, so
  scripts (and Python's `os.getenv`) do not see it. A script cannot switch
  Python on in a session built without the option: the switch is read once,
  when the session is built.

  ## Running code

  `python3 -c CODE`, `python3 FILE` (a file of the session's filesystem,
  relative to the cwd), `python3 -` or `... | python3` (code from stdin), and
  `python3 --version`. Output goes to the command's stdout, so it pipes and
  redirects like any command. An uncaught exception prints a traceback on
  stderr and exits with status 1. Unlike CPython, the value of a final bare
  expression is printed (`python3 -c '1 + 1'` prints `2`).

  ## The filesystem is the session's

  `open()` (read, write, append; text and bytes) and `pathlib.Path`
  (`read_text`, `write_text`, `read_bytes`, `write_bytes`, `exists`,
  `is_file`, `is_dir`, `iterdir`, `mkdir`, `unlink`, `rmdir`, `rename`,
  `stat`, `resolve`) work on the session's filesystem, the one scripts see:
  a file Python writes is visible to the next command and to
  `ExBashkit.Session.read_file/2`, and files written by scripts or by
  `ExBashkit.Session.write_file/3` are readable from Python. Relative paths
  resolve against the shell's cwd. Python never touches the host filesystem
  except through what the session itself maps in.

  ## What works

    * The core language: functions, closures (`nonlocal`), classes with
      methods, exceptions (`try`/`except`/`finally`, `raise`), `with` blocks,
      comprehensions, lambdas, f-strings, the walrus operator, big integers,
      type hints, `async def` / `await`.
    * Built-in types and functions: `str`, `bytes`, `int`, `float`, `list`,
      `dict`, `set`, `tuple`, `range`, `len`, `sorted`, `sum`, `min`, `max`,
      `enumerate`, `zip`, `map`, `filter`, `print` and so on.
    * Standard modules: `math`, `json`, `datetime`, `pathlib`, `os`
      (`os.getenv`, `os.environ`: exported variables only), `sys`, `typing`,
      `asyncio`, `unicodedata`.

  ## What does not

    * Third-party packages (`numpy`, `requests`, ...): nothing can be
      installed, every unknown import is a `ModuleNotFoundError`.
    * Most of the standard library: `re` is refused on purpose (regex
      backtracking could escape the time limit), and `time`, `random`,
      `collections`, `itertools`, `functools`, `dataclasses`, `io`, `csv`,
      `hashlib`, `base64`, `subprocess`, `socket`, `urllib`, `threading`,
      `shutil`, `tempfile`, `pickle`, `sqlite3`, `logging`, `argparse` and
      others do not exist.
    * No network of any kind (no `socket`, no `urllib`), whatever the
      session's `:allow_net`.
    * Some syntax: generators (`yield`), decorators and `match` statements
      are refused by the parser.
    * `sys.argv`, `sys.stdin`, `sys.exit`, `input()`, `print(file=...)`,
      `eval`, `exec` and `__import__` are unavailable; `os.path` and
      `os.listdir` do not exist (use `pathlib`).
    * The clock is virtual: `datetime.now()` and `date.today()` always return
      2024-01-01 (UTC), so code cannot read the host's time or time zone.

  ## Limits

  Each run is bounded by bashkit's Python limits (64 MiB of heap, which also
  caps buffered `print` output; recursion depth 200; 30 s) and by the
  session's own: the wall-clock budget is clamped to what is left of the
  session's `:timeout_ms`, and output to `:max_stdout_bytes`. An infinite loop
  ends with `TimeoutError` on stderr and exit status 1, a memory bomb with
  `MemoryError`; the session stays usable.

  Every `python3` call also reserves a share (about a hundredth) of the work
  budget of the `exec/2` it runs in, so one exec can start about 95 Python
  processes; a loop that starts more fails the whole exec with a resource
  limit error. Process many inputs in one Python run instead.
  """
end
