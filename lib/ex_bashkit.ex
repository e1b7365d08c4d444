defmodule ExBashkit do
  @moduledoc """
  A safe, stateful bash sandbox inside the BEAM.

  ExBashkit wraps [bashkit](https://crates.io/crates/bashkit), a virtual bash
  interpreter written in Rust with an in-memory filesystem, as a NIF. Scripts
  run without spawning processes and without touching the host: no files, no
  network, no environment of the host BEAM is visible unless you grant it.

    * `exec/1` runs one script in a fresh interpreter and throws it away.
    * `ExBashkit.Session` is a long-lived interpreter whose env, cwd, files,
      functions and aliases persist across calls: what an AI agent's shell tool
      wants.

  ## Example

      iex> {:ok, result} = ExBashkit.exec("echo hello | tr a-z A-Z")
      iex> result.stdout
      "HELLO\\n"
  """

  alias ExBashkit.{Backend, Callbacks, Result, Session}

  @doc """
  Run `script` in a fresh interpreter with default settings.

  Returns `{:ok, %ExBashkit.Result{}}` when the script ran (whatever its exit
  code) or `{:error, message}` when it could not be parsed, exceeded a default
  limit, or the interpreter failed. Nothing survives the call: use
  `ExBashkit.Session` for state that persists.

  ## Examples

      iex> {:ok, %ExBashkit.Result{stdout: "3\\n", exit_code: 0}} = ExBashkit.exec("echo $((1 + 2))")

      iex> {:ok, %ExBashkit.Result{exit_code: 7}} = ExBashkit.exec("exit 7")

      iex> {:error, "parse error" <> _} = ExBashkit.exec("if then fi")
  """
  @spec exec(String.t()) :: {:ok, Result.t()} | {:error, String.t()}
  def exec(script) do
    script = Session.Exec.script!(script, "ExBashkit.exec/1")
    isolation = Session.Options.default_isolation()
    # A default session's configuration: the defaults live in Elixir only.
    config = Session.Options.parse!([]).native

    with :ok <- Session.Exec.check_script(script),
         {:ok, ref} <- Backend.exec_once(config, script, isolation, %{}) do
      Callbacks.await(ref, Callbacks.no_callbacks())
    end
  end
end
