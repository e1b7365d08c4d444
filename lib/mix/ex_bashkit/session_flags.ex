defmodule Mix.ExBashkit.SessionFlags do
  @moduledoc """
  The command-line flags that describe a sandbox session, shared by
  `mix ex_bashkit.shell` and `mix ex_bashkit.mcp`: parsing, the
  `ExBashkit.Session.new/1` options they give, `--file SNAPSHOT` and
  starting the application with build output on stderr.

  Flags: `--file SNAPSHOT`, `--mount VFS=HOST[:ro|:rw]` (repeatable),
  `--allow-net URL` (repeatable), `--credential PREFIX=ENV_VAR`
  (repeatable), `--python`, `--git`, `--sqlite`,
  `--typescript`, `--timeout MS`, `--key KEY`.
  """

  # A flag added here reaches both tasks.
  @switches [
    file: :string,
    mount: :keep,
    allow_net: :keep,
    credential: :keep,
    python: :boolean,
    git: :boolean,
    sqlite: :boolean,
    typescript: :boolean,
    timeout: :integer,
    key: :string
  ]

  @doc """
  Parse `args` for task `task` (its name, for messages) with the shared
  flags plus `extra` switches; raises `Mix.Error` on an unknown flag or a
  stray argument.
  """
  @spec parse!([String.t()], String.t(), keyword()) :: keyword()
  def parse!(args, task, extra \\ []) do
    {opts, rest, invalid} = OptionParser.parse(args, strict: @switches ++ extra)

    cond do
      invalid != [] -> Mix.raise("#{task}: invalid option #{invalid |> hd() |> elem(0)}")
      rest != [] -> Mix.raise("#{task}: unexpected argument #{hd(rest)}")
      true -> opts
    end
  end

  @doc """
  The `ExBashkit.Session.new/1` options the flags in `opts` give (mounts,
  network, grants); the caller adds its own `:limits`.
  """
  @spec session_options!(keyword(), String.t()) :: keyword()
  def session_options!(opts, task) do
    [
      mounts: opts |> Keyword.get_values(:mount) |> Enum.map(&mount!(&1, task)),
      allow_net: Keyword.get_values(opts, :allow_net),
      credentials: opts |> Keyword.get_values(:credential) |> Enum.map(&credential!(&1, task)),
      python: Keyword.get(opts, :python, false),
      git: Keyword.get(opts, :git, false),
      sqlite: Keyword.get(opts, :sqlite, false),
      typescript: Keyword.get(opts, :typescript, false)
    ]
  end

  @doc """
  `ExBashkit.Session.new(session_opts)`, a bad option raised as `Mix.Error`.
  """
  @spec new_session!(keyword(), String.t()) :: ExBashkit.Session.t()
  def new_session!(session_opts, task) do
    ExBashkit.Session.new(session_opts)
  rescue
    e in ArgumentError -> Mix.raise("#{task}: " <> Exception.message(e))
  end

  @doc """
  The snapshot key: `--key`, else `EX_BASHKIT_SNAPSHOT_KEY`; `nil` when
  neither is set (or blank).
  """
  @spec key(keyword()) :: String.t() | nil
  def key(opts) do
    case Keyword.get(opts, :key) || System.get_env("EX_BASHKIT_SNAPSHOT_KEY") do
      "" -> nil
      key -> key
    end
  end

  @doc """
  Restore `session` from `--file SNAPSHOT` when given (keyed with `key/1`);
  a file that cannot be read or restored raises `Mix.Error`.
  """
  @spec restore!(ExBashkit.Session.t(), keyword(), String.t()) :: :ok
  def restore!(session, opts, task) do
    case Keyword.get(opts, :file) do
      nil -> :ok
      file -> restore!(session, file, key(opts), task)
    end
  end

  defp restore!(session, file, key, task) do
    restore_opts = if key, do: [key: key], else: []

    with {:ok, bytes} <- File.read(file),
         {:ok, _session} <- ExBashkit.Session.restore(session, bytes, restore_opts) do
      :ok
    else
      {:error, reason} when is_atom(reason) ->
        Mix.raise("#{task}: --file #{file}: #{:file.format_error(reason)}")

      {:error, message} ->
        Mix.raise("#{task}: --file #{file}: #{message}")
    end
  end

  @doc """
  `--timeout MS` as `[timeout_ms: ms]`, `[]` when absent; a value below 1
  raises `Mix.Error`.
  """
  @spec timeout!(keyword(), String.t()) :: [{:timeout_ms, pos_integer()}]
  def timeout!(opts, task) do
    case Keyword.fetch(opts, :timeout) do
      :error -> []
      {:ok, ms} when ms >= 1 -> [timeout_ms: ms]
      {:ok, ms} -> Mix.raise("#{task}: --timeout must be a positive integer, got: #{ms}")
    end
  end

  @doc """
  `PREFIX=ENV_VAR` as a `:credentials` entry: the host environment
  variable's value (`env`, the host's by default) sent as a bearer token
  with every request under PREFIX. Messages name the variable, never its
  value.
  """
  @spec credential!(String.t(), String.t(), %{String.t() => String.t()}) ::
          {String.t(), [bearer: String.t()]}
  def credential!(spec, task, env \\ System.get_env()) do
    with [prefix, var] <- String.split(spec, "=", parts: 2),
         true <- prefix != "" and var != "" do
      case Map.get(env, var, "") do
        "" -> Mix.raise("#{task}: --credential #{spec}: #{var} is not set in the environment")
        token -> {prefix, bearer: token}
      end
    else
      _ -> Mix.raise("#{task}: --credential takes PREFIX=ENV_VAR, got: #{spec}")
    end
  end

  @doc """
  `VFS=HOST[:ro|:rw]` as a `:mounts` entry (read-only unless `:rw`, the
  host path expanded); anything else raises `Mix.Error`.
  """
  @spec mount!(String.t(), String.t()) :: {String.t(), String.t(), :read_only | :read_write}
  def mount!(spec, task) do
    with [vfs, host] <- String.split(spec, "=", parts: 2),
         true <- vfs != "" and host != "" do
      {host, mode} =
        cond do
          String.ends_with?(host, ":rw") -> {String.slice(host, 0..-4//1), :read_write}
          String.ends_with?(host, ":ro") -> {String.slice(host, 0..-4//1), :read_only}
          true -> {host, :read_only}
        end

      {vfs, Path.expand(host), mode}
    else
      _ -> Mix.raise("#{task}: --mount takes VFS=HOST[:ro|:rw], got: #{spec}")
    end
  end

  @doc """
  Compile and start the application with build output (cargo, the Elixir
  compiler) on stderr, so that stdout carries only what the task writes.
  """
  @spec start_app() :: :ok
  def start_app do
    leader = Process.group_leader()
    Process.group_leader(self(), Process.whereis(:standard_error))

    try do
      Mix.Task.run("app.start")
      :ok
    after
      Process.group_leader(self(), leader)
    end
  end
end
