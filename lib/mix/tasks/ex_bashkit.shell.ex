defmodule Mix.Tasks.ExBashkit.Shell do
  @shortdoc "Opens an interactive shell on a new sandbox session"

  @moduledoc """
  Opens an interactive shell on a new `ExBashkit.Session` (see
  `ExBashkit.Shell` for prompts, meta-commands and the piped mode).

      mix ex_bashkit.shell [--file SNAPSHOT] [--mount VFS=HOST[:ro|:rw]]
                           [--allow-net URL] [--credential PREFIX=ENV_VAR]
                           [--python] [--git] [--sqlite]
                           [--typescript] [--timeout MS] [--key KEY]

    * `--file SNAPSHOT` - start from a snapshot file (`%snapshot` writes them).
    * `--mount VFS=HOST[:ro|:rw]` - mount host directory HOST at VFS in the
      sandbox, read-only unless `:rw` (repeatable).
    * `--allow-net URL` - let `curl`/`wget`/`http` reach URL (repeatable).
    * `--credential PREFIX=ENV_VAR` - send the host environment variable
      ENV_VAR's value as a bearer token (`Authorization: Bearer ...`) with
      every request under PREFIX, which `--allow-net` must admit; the shell
      never sees it (repeatable; see "Credentials" in `ExBashkit.Session`).
    * `--python` - register the sandboxed `python`/`python3` builtin.
    * `--git`, `--sqlite`, `--typescript` - grant the virtual `git`,
      `sqlite3` and `ts` (`ExBashkit.Git`, `ExBashkit.Sqlite`,
      `ExBashkit.TypeScript`).
    * `--timeout MS` - per-command timeout (default 30 000; `%timeout`
      changes it).
    * `--key KEY` - key for `--file`, `%snapshot` and `%restore` (default:
      `EX_BASHKIT_SNAPSHOT_KEY`).

  Piped, it prints only the scripts' output and exits with the status of the
  last command (or the one `exit` was given):

      $ printf 'echo hi\\n' | mix ex_bashkit.shell
      hi

  Build output (cargo, the Elixir compiler) goes to stderr, so that stdout
  carries nothing but the scripts' output.
  """

  use Mix.Task

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

  @impl Mix.Task
  def run(args) do
    {opts, rest, invalid} = OptionParser.parse(args, strict: @switches)

    cond do
      invalid != [] -> Mix.raise("ex_bashkit.shell: invalid option #{invalid |> hd() |> elem(0)}")
      rest != [] -> Mix.raise("ex_bashkit.shell: unexpected argument #{hd(rest)}")
      true -> :ok
    end

    start_app()
    key = Keyword.get(opts, :key) || System.get_env("EX_BASHKIT_SNAPSHOT_KEY")
    session = new_session(opts)
    restore(session, Keyword.get(opts, :file), key)

    shell_opts = [key: blank_to_nil(key)] ++ timeout(opts)

    case ExBashkit.Shell.start(session, shell_opts) do
      {:ok, 0} -> :ok
      {:ok, status} -> exit({:shutdown, status})
    end
  end

  # Compile and start the application with build output on stderr: stdout is
  # the scripts' alone.
  defp start_app do
    leader = Process.group_leader()
    Process.group_leader(self(), Process.whereis(:standard_error))

    try do
      Mix.Task.run("app.start")
    after
      Process.group_leader(self(), leader)
    end
  end

  defp new_session(opts) do
    session_opts = [
      mounts: opts |> Keyword.get_values(:mount) |> Enum.map(&mount!/1),
      allow_net: Keyword.get_values(opts, :allow_net),
      credentials: opts |> Keyword.get_values(:credential) |> Enum.map(&credential!/1),
      python: Keyword.get(opts, :python, false),
      git: Keyword.get(opts, :git, false),
      sqlite: Keyword.get(opts, :sqlite, false),
      typescript: Keyword.get(opts, :typescript, false),
      # The shell's own per-command timeout governs (`--timeout`, `%timeout`).
      limits: [timeout_ms: 7 * 24 * 3_600_000]
    ]

    ExBashkit.Session.new(session_opts)
  rescue
    e in ArgumentError -> Mix.raise("ex_bashkit.shell: " <> Exception.message(e))
  end

  defp restore(_session, nil, _key), do: :ok

  defp restore(session, file, key) do
    opts = if blank_to_nil(key), do: [key: key], else: []

    with {:ok, bytes} <- File.read(file),
         {:ok, _session} <- ExBashkit.Session.restore(session, bytes, opts) do
      :ok
    else
      {:error, reason} when is_atom(reason) ->
        Mix.raise("ex_bashkit.shell: --file #{file}: #{:file.format_error(reason)}")

      {:error, message} ->
        Mix.raise("ex_bashkit.shell: --file #{file}: #{message}")
    end
  end

  defp timeout(opts) do
    case Keyword.fetch(opts, :timeout) do
      :error -> []
      {:ok, ms} when ms >= 1 -> [timeout_ms: ms]
      {:ok, ms} -> Mix.raise("ex_bashkit.shell: --timeout must be a positive integer, got: #{ms}")
    end
  end

  @doc false
  # `VFS=HOST[:ro|:rw]` as a `:mounts` entry (read-only unless `:rw`).
  def mount!(spec) do
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
      _ -> Mix.raise("ex_bashkit.shell: --mount takes VFS=HOST[:ro|:rw], got: #{spec}")
    end
  end

  @doc false
  # `PREFIX=ENV_VAR` as a `:credentials` entry, the token read from the host
  # environment (`env`, the host's by default). Messages name the variable,
  # never its value.
  def credential!(spec, env \\ System.get_env()) do
    with [prefix, var] <- String.split(spec, "=", parts: 2),
         true <- prefix != "" and var != "" do
      case Map.get(env, var, "") do
        "" ->
          Mix.raise(
            "ex_bashkit.shell: --credential #{spec}: #{var} is not set in the environment"
          )

        token ->
          {prefix, bearer: token}
      end
    else
      _ -> Mix.raise("ex_bashkit.shell: --credential takes PREFIX=ENV_VAR, got: #{spec}")
    end
  end

  defp blank_to_nil(nil), do: nil
  defp blank_to_nil(""), do: nil
  defp blank_to_nil(key), do: key
end
