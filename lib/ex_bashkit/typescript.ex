defmodule ExBashkit.TypeScript do
  @moduledoc """
  The `ts` command a session gets with the `:typescript` option.

      iex> session = ExBashkit.Session.new(typescript: true)
      iex> {:ok, result} = ExBashkit.Session.exec(session, ~S{ts -c 'const n: number = 6; console.log(n * 7)'})
      iex> result.stdout
      "42\\n"

  It is the TypeScript interpreter compiled into bashkit (cargo feature
  `typescript`): ZapCode, a TypeScript/JavaScript subset interpreter written
  in Rust, running inside the library's OS process. No Node.js, Deno or Bun
  and no V8 are involved, and nothing needs installing. ZapCode is marked
  experimental by bashkit. This module holds only this documentation.

  ## Enabling it

  `typescript: true` registers `ts` and its aliases `typescript`, `node`,
  `deno` and `bun`. Without it all five are unknown commands (exit code
  127); `:commands` governs each name, like any command's.

  ## Running code

  `ts FILE` (a file of the session's filesystem), `ts -c CODE` (`node -e
  CODE`), or code on stdin (`... | ts`). Types are checked only as far as
  parsing goes: they are erased, as with `tsc --noCheck`. `console.log`
  prints to stdout; when nothing is printed, the value of the last
  expression is. The async globals `readFile`, `writeFile`, `exists`,
  `readDir`, `mkdir`, `remove` and `stat` work on the session's filesystem.
  Output printed after one of those calls is lost (a ZapCode limitation):
  return the value as the last expression instead.

  ## What does not work

  `import` / `require` (no module system, no npm packages), `eval` and
  `Function`, `fetch` or any network, the `process`, `Deno` and `Bun`
  globals, and Node's command-line options.

  ## Limits

  Each run is bounded by bashkit's TypeScript limits (1 000 000
  allocations, a call depth of 512, 30 s) and by the session's: the
  wall-clock budget is clamped to what is left of the exec's timeout and of
  the call's own `:timeout_ms` (`Session.exec/3`), so an endless loop ends
  there, and the session stays usable. bashkit's 64 MiB memory limit is not
  enforced by ZapCode 1.5.1: a program that doubles an array holds memory
  until its worker's limit (see SECURITY.md).

  A program given as an argument or on stdin that nests deeper than 256
  brackets, or chains more than 1 000 operators in one expression, is
  refused before it runs ("ts: program refused: ...", exit 1): ZapCode's
  parser would overflow its stack.
  """
end
