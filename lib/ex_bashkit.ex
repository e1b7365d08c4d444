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
  code) or `{:error, message}` when it could not be parsed, exceeded a limit,
  timed out, or the interpreter failed. `run/2` is the same call answering
  `{:error, %ExBashkit.Error{}}` (see `ExBashkit.Error`).
  Nothing survives the call: use `ExBashkit.Session` for state that persists.

  Options: those of `ExBashkit.Session.exec/3` (`:stdin`, `:timeout_ms`,
  `:stream_to`, `:track_changes`), plus `:limits`, the `:limits` of
  `ExBashkit.Session.new/1` for this one interpreter. As a map or a keyword
  list.

  ## Examples

      iex> {:ok, %ExBashkit.Result{stdout: "3\\n", exit_code: 0}} = ExBashkit.exec("echo $((1 + 2))")

      iex> {:ok, %ExBashkit.Result{exit_code: 7}} = ExBashkit.exec("exit 7")

      iex> {:error, "parse error" <> _} = ExBashkit.exec("if then fi")

      iex> {:ok, result} = ExBashkit.exec("tr a-z A-Z", stdin: "hi\\n")
      iex> result.stdout
      "HI\\n"

  """
  @spec exec(String.t(), keyword() | map()) :: {:ok, Result.t()} | {:error, String.t()}
  def exec(script, opts \\ []), do: ExBashkit.Error.to_message(run(script, opts))

  @doc """
  Run `script` like `exec/2`, answering a failure as data:
  `{:ok, %ExBashkit.Result{}}` or `{:error, %ExBashkit.Error{}}` (the reason
  as an atom, the `:limits` key to raise, the output written before the
  stop). Takes the options of `exec/2`.

  ## Examples

      iex> {:error, %ExBashkit.Error{reason: :parse}} = ExBashkit.run("if then fi")

      iex> {:error, error} = ExBashkit.run("while true; do :; done", limits: [max_loop_iterations: 10])
      iex> {error.reason, error.limit}
      {:limit, :max_loop_iterations}
  """
  @spec run(String.t(), keyword() | map()) :: {:ok, Result.t()} | {:error, ExBashkit.Error.t()}
  def run(script, opts \\ [])

  def run(script, opts) when opts == [] or opts == %{} do
    script = Session.Exec.script!(script, "ExBashkit.run/2")
    # A default session's configuration: the defaults live in Elixir only.
    once(script, Session.Options.parse_default!().native)
  end

  # With options: `:limits` configures the interpreter; call options (stdin,
  # a timeout, streaming, change tracking) need a session's exec.
  def run(script, opts) when is_list(opts) or is_map(opts) do
    script = Session.Exec.script!(script, "ExBashkit.run/2")
    {limits, call} = opts |> Enum.to_list() |> Keyword.pop(:limits, [])

    case call do
      [] -> once(script, Session.Options.parse!(limits: limits).native)
      _ -> Session.new(limits: limits) |> Session.run(script, call)
    end
  end

  def run(_script, opts),
    do:
      raise(
        ArgumentError,
        "ExBashkit.run/2 options must be a keyword list or a map, got: #{inspect(opts)}"
      )

  # A one-shot exec on an interpreter of its own, built for `config` (a
  # session configuration's native map): in advance when the configuration
  # is asked for often (`native/ex_bashkit/src/run/warm.rs`). It is answered
  # by the interpreter's deadline at the latest (plus a slack): by the
  # worker's owner, or in the node by this process (`Backend.give_up/4`).
  defp once(script, config) do
    submitted =
      with :ok <- Session.Exec.check_script(script),
           do:
             Backend.exec_once(config, script, Session.Options.default_isolation(), meta(config))

    case submitted do
      {:ok, ref, give_up} -> Callbacks.await(ref, %{Callbacks.no_callbacks() | give_up: give_up})
      {:done, outcome} -> Callbacks.result(outcome)
      {:error, _} = error -> ExBashkit.Error.wrap(error)
    end
  end

  defp meta(config),
    do: %{timeout_ms: Session.Exec.deadline_ms(nil, config.limits[:timeout_ms])}
end
