defmodule ExBashkit.Tool do
  @moduledoc """
  The `bash` tool an LLM calls, over an `ExBashkit.Session`.

  Three pieces, for any agent framework or a hand-written tool loop:

    * `definition/0` - the tool's name, description and JSON schema, to send
      to the model (input `{"commands": string, "timeout_ms"?: integer}`,
      bashkit's own tool contract).
    * `definition/1` - the same, its description naming the extra tools
      *this* session was granted (`:python`, `:git`, `:sqlite`,
      `:typescript`).
    * `system_prompt/1` - a short text describing *this* session (user, home,
      cwd, mounts, network, granted tools, limits) for the model's system
      prompt.
    * `call/2` - run one tool call and return a JSON-ready map:
      `%{"stdout" => ..., "stderr" => ..., "exit_code" => ..., "error" => ...}`.

  Beside `bash`, the file tools of `ExBashkit.Tool.Files` (`read_file`,
  `write_file`, `edit_file`, `glob`, `grep`): `definitions/0,1` lists them
  all, `call/3` runs any of them by name. These definitions are the one
  source of the tools `ExBashkit.MCP` serves.

  ## Example

      session = ExBashkit.Session.new(cwd: "/work", limits: [max_commands: 50_000])
      tools = [ExBashkit.Tool.definition()]
      system = "You are a coding assistant.\\n\\n" <> ExBashkit.Tool.system_prompt(session)

      # ...the model answers with a tool call {"commands": "ls -la"}:
      ExBashkit.Tool.call(session, %{"commands" => "ls -la"})
      #=> %{"stdout" => "...", "stderr" => "", "exit_code" => 0, "error" => nil}

  ## Output

  `stdout` and `stderr` are each cut to 2 000 lines and 50 KB; a cut
  stream ends with a line such as `[output truncated: 48213 more lines]`.
  Bytes that are not UTF-8 are replaced with U+FFFD so the map encodes as
  JSON. A timeout (the call's `timeout_ms` or the session's own
  `:timeout_ms` limit) is exit code 124 with `"error" => "timeout"`, as in
  bashkit's tool contract, and keeps the output produced until then. A
  script that cannot run (a syntax error, a resource limit) is exit code 1
  with the reason in `stderr` and `error`; an invalid input is exit code 2.
  The session stays usable in every case.
  """

  alias ExBashkit.Session
  alias ExBashkit.Session.Defaults
  alias ExBashkit.Tool.{Files, History}

  @max_lines 2_000
  @max_bytes 50 * 1024

  @commands ~w(
    echo printf cat read grep sed awk jq head tail sort uniq cut tr wc nl paste column comm diff
    strings tac rev cd pwd ls find mkdir mktemp rm rmdir cp mv touch chmod ln file stat tar gzip
    gunzip du df test true false exit export set unset local shift source eval declare readonly
    shopt getopts sleep date seq expr xargs tee timeout basename dirname realpath pushd popd
    whoami hostname uname id env printenv curl wget od xxd hexdump base64
  )

  @description """
  Run bash commands in a sandboxed shell. It is a virtual bash interpreter \
  (bashkit) with an in-memory filesystem, not a Linux machine: there are no \
  real processes, no package managers (apt, pip, npm), no compilers and no \
  editors. Shell state (variables, cwd, functions, aliases) and files persist \
  between calls. Available commands include: #{Enum.join(@commands, " ")}; \
  pipes, redirections, loops, functions, here-documents and $(...) work as in \
  bash. Network access (curl, wget) is off unless the session allows listed \
  URLs. Output is cut to #{@max_lines} lines and 50 KB per stream; a call is \
  stopped after timeout_ms (exit code 124).\
  """

  @typedoc "What `call/2` returns: JSON-ready, string keys."
  @type response :: %{
          required(String.t()) => String.t() | integer() | boolean() | list() | nil
        }

  @doc """
  The tool definition: `%{name: "bash", description: binary, input_schema:
  map}`, the schema a JSON Schema object with string keys.

  ## Examples

      iex> %{name: "bash", input_schema: schema} = ExBashkit.Tool.definition()
      iex> schema["required"]
      ["commands"]
      iex> schema["properties"]["timeout_ms"]["type"]
      "integer"
  """
  @spec definition() :: %{name: String.t(), description: String.t(), input_schema: map()}
  def definition, do: definition_with(@description)

  @doc """
  The tool definition for `session`: `definition/0`'s, with a description
  that also names the tools the session was granted (`:python`, `:git`,
  `:sqlite`, `:typescript`), so the model knows it may call them. Waits for
  a running exec, like `ExBashkit.Session.state/1`.

  ## Examples

      iex> session = ExBashkit.Session.new(sqlite: true)
      iex> ExBashkit.Tool.definition(session).description =~ "sqlite3"
      true
      iex> ExBashkit.Tool.definition(ExBashkit.Session.new()).description ==
      ...>   ExBashkit.Tool.definition().description
      true
  """
  @spec definition(Session.t()) :: %{
          name: String.t(),
          description: String.t(),
          input_schema: map()
        }
  def definition(session) do
    case tools_text(Session.Mounts.describe(session).tools) do
      nil -> definition()
      text -> definition_with(@description <> " Also available here: " <> text <> ".")
    end
  end

  defp definition_with(description) do
    %{
      name: "bash",
      description: description,
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "commands" => %{
            "type" => "string",
            "description" => "Bash commands to run, as with bash -c"
          },
          "timeout_ms" => %{
            "type" => "integer",
            "minimum" => 1,
            "description" => "Optional: stop the commands after this many milliseconds"
          }
        },
        "required" => ["commands"],
        "additionalProperties" => false
      }
    }
  end

  @doc """
  Every tool's definition, `bash` (`definition/0`) first, then the file
  tools of `ExBashkit.Tool.Files`.

  ## Examples

      iex> Enum.map(ExBashkit.Tool.definitions(), & &1.name)
      ["bash", "read_file", "write_file", "edit_file", "glob", "grep"]
  """
  @spec definitions() :: [%{name: String.t(), description: String.t(), input_schema: map()}]
  def definitions, do: [definition() | Files.definitions()]

  @doc """
  `definitions/0` for `session`: `bash`'s description names the tools the
  session was granted, as in `definition/1`. With `history: true`, the
  history tools follow (`ExBashkit.Tool.History`: `commit`, `checkout`,
  `log`, `diff`), an agent's undo.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Tool.definitions(session, history: true) |> Enum.map(& &1.name) |> Enum.take(-4)
      ["commit", "checkout", "log", "diff"]
  """
  @spec definitions(Session.t(), [{:history, boolean()}]) :: [
          %{name: String.t(), description: String.t(), input_schema: map()}
        ]
  def definitions(session, opts \\ []) do
    history = if Keyword.get(opts, :history, false), do: History.definitions(), else: []
    [definition(session) | Files.definitions()] ++ history
  end

  @doc """
  Run tool `name` (one of `definitions/2`) on `session`: `call/2` for
  `"bash"`, `ExBashkit.Tool.Files.call/3` for the file tools,
  `ExBashkit.Tool.History.call/3` for the history ones. An unknown name is
  `%{"error" => "unknown tool: ..."}`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Tool.call(session, "bash", %{"commands" => "echo hi > /a.txt"})["exit_code"]
      0
      iex> ExBashkit.Tool.call(session, "read_file", %{"path" => "/a.txt"})["content"]
      "hi\\n"
      iex> ExBashkit.Tool.call(session, "nope", %{})
      %{"error" => "unknown tool: \\"nope\\""}
  """
  @spec call(Session.t(), String.t(), map()) :: response()
  def call(session, "bash", input), do: call(session, input)

  def call(session, name, input) do
    if History.tool?(name),
      do: History.call(session, name, input),
      else: Files.call(session, name, input)
  end

  @doc """
  A short description of `session` for the model's system prompt: user,
  home, current directory, host mounts (sandbox paths and modes, never the
  host paths), network access, the tools it was granted (`:python`, `:git`,
  `:sqlite`, `:typescript`) and limits. Waits for a running exec, like
  `ExBashkit.Session.state/1`.

  ## Examples

      iex> session = ExBashkit.Session.new(cwd: "/work")
      iex> prompt = ExBashkit.Tool.system_prompt(session)
      iex> prompt =~ "Working directory: /work"
      true
      iex> prompt =~ "Network: none"
      true
      iex> ExBashkit.Tool.system_prompt(ExBashkit.Session.new(git: true)) =~ "git (virtual git"
      true
  """
  @spec system_prompt(Session.t()) :: String.t()
  def system_prompt(session) do
    # The prompt needs the state: a session that cannot give it is an error
    # of the caller's setup, as before `state/2` returned errors.
    state =
      case Session.state(session) do
        {:ok, state} -> state
        {:error, message} -> raise RuntimeError, "ExBashkit.Tool.system_prompt/1: " <> message
      end

    info = Session.Mounts.describe(session)
    home = state.variables["HOME"] || state.env["HOME"] || "/"

    [
      "You have a bash shell in a sandbox (bashkit: a virtual bash interpreter with an " <>
        "in-memory filesystem; not a real Linux machine, no package managers or compilers).",
      "User: #{info.username} (home #{home}), host: #{info.hostname}.",
      "Working directory: #{state.cwd}. Shell state and files persist between calls.",
      mounts_line(info),
      network_line(info.allow_net),
      credentials_line(info.credentials),
      tools_line(info.tools),
      limits_line(info.limits),
      "Output is cut to #{@max_lines} lines and 50 KB per stream."
    ]
    |> Enum.reject(&is_nil/1)
    |> Enum.join("\n")
  end

  defp mounts_line(%{mounts: [], virtual_fs: []}),
    do: "Files live in memory only and disappear with the session."

  defp mounts_line(%{mounts: mounts, virtual_fs: virtual_fs}) do
    host =
      mounts
      |> Enum.sort_by(& &1.vfs_path)
      |> Enum.map(fn %{vfs_path: path, mode: mode} ->
        "#{path} (#{if mode == :read_only, do: "read-only", else: "read-write"})"
      end)

    app = Enum.map(Enum.sort(virtual_fs), &"#{&1} (provided by the application)")

    "Mounted directories: #{Enum.join(host ++ app, ", ")}. " <>
      "Everything else lives in memory only."
  end

  defp network_line(nil), do: "Network: none (curl and wget fail)."
  defp network_line(:all), do: "Network: any URL (curl, wget)."

  defp network_line(patterns),
    do: "Network: only URLs under #{Enum.join(patterns, ", ")} (curl, wget)."

  # Where requests are authenticated for the model, never with what.
  defp credentials_line([]), do: nil

  defp credentials_line(credentials) do
    described =
      Enum.map_join(credentials, "; ", fn
        %{prefix: prefix, placeholder: nil} ->
          "#{prefix} (added for you, send none)"

        %{prefix: prefix, placeholder: name} ->
          "#{prefix} (use $#{name} as the key; it holds a stand-in the host replaces)"
      end)

    "Authenticated URLs: #{described}."
  end

  defp tools_line(commands) do
    case tools_text(commands) do
      nil -> nil
      text -> "Extra tools: #{text}."
    end
  end

  # What each grant is, in words, after the commands it gave the session.
  @tool_texts [
    python: "a Python subset interpreter: no third-party packages, no network",
    git:
      "virtual git on the sandbox filesystem: init, add, commit, status, log, branch, " <>
        "checkout, show, ls-files, rev-parse, restore, grep; no network transfers, " <>
        "`git diff` is only a placeholder",
    sqlite: "SQLite; database files live in the sandbox filesystem",
    typescript: "a TypeScript/JavaScript interpreter subset: no npm packages, no network"
  ]

  # The granted tools in words, from the session's description (the
  # commands each grant gave it, the command policy applied); `nil` when
  # none.
  defp tools_text(tools) do
    @tool_texts
    |> Enum.flat_map(fn {grant, text} ->
      case Map.get(tools, grant, []) do
        [] -> []
        names -> ["#{Enum.join(names, ", ")} (#{text})"]
      end
    end)
    |> case do
      [] -> nil
      parts -> Enum.join(parts, "; ")
    end
  end

  defp limits_line(limits) do
    timeout = Map.get(limits, :timeout_ms, Defaults.bashkit_limit(:timeout_ms))
    commands = Map.get(limits, :max_commands, Defaults.bashkit_limit(:max_commands))

    "Limits per call: #{commands} commands, #{format_ms(timeout)}" <>
      if(Map.has_key?(limits, :max_total_commands),
        do: "; #{limits.max_total_commands} commands in all.",
        else: "."
      )
  end

  defp format_ms(ms) when rem(ms, 1000) == 0, do: "#{div(ms, 1000)} s"
  defp format_ms(ms), do: "#{ms} ms"

  @doc """
  Run one tool call on `session`. `input` is the decoded JSON of the
  model's call: `%{"commands" => string}` with an optional `"timeout_ms"`
  (a positive integer). Atom keys are accepted too.

  Returns `%{"stdout" => binary, "stderr" => binary, "exit_code" => integer,
  "error" => nil | binary}` (see the module doc for truncation, timeouts and
  errors).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Tool.call(session, %{"commands" => "echo hi; echo oops >&2; exit 3"})
      %{"stdout" => "hi\\n", "stderr" => "oops\\n", "exit_code" => 3, "error" => nil}
      iex> ExBashkit.Tool.call(session, %{"commands" => "sleep 5", "timeout_ms" => 50})["exit_code"]
      124
  """
  @spec call(Session.t(), map()) :: response()
  def call(session, input) when is_map(input) do
    with {:ok, commands} <- commands(input),
         {:ok, timeout} <- timeout(input) do
      run(session, commands, timeout)
    else
      {:error, message} -> response("", message <> "\n", 2, "invalid input: " <> message)
    end
  end

  def call(_session, input),
    do: response("", "input must be a map\n", 2, "invalid input: #{inspect(input)}")

  defp run(session, commands, timeout) do
    tag = make_ref()
    opts = [stream_to: {self(), tag}] ++ if(timeout, do: [timeout_ms: timeout], else: [])
    started = System.monotonic_time(:millisecond)
    outcome = Session.run(session, commands, opts)
    elapsed = System.monotonic_time(:millisecond) - started
    # Forwarded by this process while it waited: all in the mailbox now.
    {stdout, stderr} = drain(tag, [], [])

    case outcome do
      {:ok, result} ->
        response(
          cut(result.stdout, result.stdout_truncated),
          cut(result.stderr, result.stderr_truncated),
          result.exit_code,
          nil
        )

      {:error, %ExBashkit.Error{reason: :timeout}} ->
        seconds = :erlang.float_to_binary(elapsed / 1000, decimals: 1)
        note = "bashkit: execution timed out after #{seconds}s\n"
        response(cut(stdout, false), cut(stderr, false) <> note, 124, "timeout")

      {:error, %ExBashkit.Error{message: message}} ->
        response(cut(stdout, false), cut(stderr, false) <> message <> "\n", 1, message)
    end
  end

  defp drain(tag, out, err) do
    receive do
      {^tag, {:stdout, chunk}} -> drain(tag, [out | chunk], err)
      {^tag, {:stderr, chunk}} -> drain(tag, out, [err | chunk])
    after
      0 -> {IO.iodata_to_binary(out), IO.iodata_to_binary(err)}
    end
  end

  defp commands(input) do
    case fetch(input, "commands") do
      {:ok, commands} when is_binary(commands) ->
        if String.valid?(commands),
          do: {:ok, commands},
          else: {:error, "\"commands\" is not valid UTF-8"}

      {:ok, other} ->
        {:error, "\"commands\" must be a string, got: #{inspect(other)}"}

      :error ->
        {:error, "\"commands\" is required"}
    end
  end

  defp timeout(input) do
    case fetch(input, "timeout_ms") do
      :error ->
        {:ok, nil}

      {:ok, nil} ->
        {:ok, nil}

      {:ok, ms} when is_integer(ms) and ms >= 1 ->
        {:ok, ms}

      {:ok, other} ->
        {:error, "\"timeout_ms\" must be a positive integer, got: #{inspect(other)}"}
    end
  end

  defp fetch(input, "commands"), do: fetch(input, "commands", :commands)
  defp fetch(input, "timeout_ms"), do: fetch(input, "timeout_ms", :timeout_ms)

  defp fetch(input, string_key, atom_key) do
    with :error <- Map.fetch(input, string_key), do: Map.fetch(input, atom_key)
  end

  defp response(stdout, stderr, exit_code, error) do
    %{"stdout" => stdout, "stderr" => stderr, "exit_code" => exit_code, "error" => error}
  end

  @doc false
  # `text` cut to the line and byte caps, ending with a marker line when
  # cut; `capped?` says the session already dropped output past its own
  # byte cap. Always valid UTF-8.
  @spec cut(binary(), boolean()) :: binary()
  def cut(text, capped?) do
    total = line_count(text)
    kept = take_lines(text, @max_lines)
    kept = if byte_size(kept) > @max_bytes, do: cut_bytes(kept, @max_bytes), else: kept
    shown = if kept == text, do: total, else: complete_lines(kept)
    more = total - shown

    marker =
      cond do
        kept != text and capped? ->
          "[output truncated: #{more_lines(more)}, and more dropped by the session's byte cap]\n"

        kept != text ->
          "[output truncated: #{more_lines(more)}]\n"

        capped? ->
          "[output truncated: more dropped by the session's byte cap]\n"

        true ->
          ""
      end

    kept =
      if marker != "" and kept != "" and not String.ends_with?(kept, "\n"),
        do: kept <> "\n",
        else: kept

    printable(kept) <> marker
  end

  defp more_lines(1), do: "1 more line"
  defp more_lines(n), do: "#{n} more lines"

  # Lines, counting a last line without its newline.
  defp line_count(""), do: 0

  defp line_count(text) do
    newlines = length(:binary.matches(text, "\n"))
    if String.ends_with?(text, "\n"), do: newlines, else: newlines + 1
  end

  # Lines shown whole (a cut last line counts as not shown).
  defp complete_lines(text), do: length(:binary.matches(text, "\n"))

  # The first `n` lines, newlines included.
  defp take_lines(text, n) do
    case :binary.matches(text, "\n") do
      matches when length(matches) > n ->
        {pos, 1} = Enum.at(matches, n - 1)
        binary_part(text, 0, pos + 1)

      _ ->
        text
    end
  end

  # At most `max` bytes: whole lines when one fits, else a UTF-8-safe cut.
  defp cut_bytes(text, max) do
    head = binary_part(text, 0, max)

    case :binary.matches(head, "\n") do
      [] -> utf8_prefix(head)
      matches -> binary_part(head, 0, elem(List.last(matches), 0) + 1)
    end
  end

  # Drop a UTF-8 sequence cut at the end (at most 3 bytes of it).
  defp utf8_prefix(bin) do
    case bin |> String.chunk(:valid) |> List.last() do
      last when is_binary(last) and byte_size(last) < 4 ->
        if String.valid?(last),
          do: bin,
          else: binary_part(bin, 0, byte_size(bin) - byte_size(last))

      _ ->
        bin
    end
  end

  # Non-UTF-8 bytes replaced with U+FFFD, so the response encodes as JSON.
  defp printable(text) do
    if String.valid?(text) do
      text
    else
      text
      |> String.chunk(:valid)
      |> Enum.map(fn chunk -> if String.valid?(chunk), do: chunk, else: "\uFFFD" end)
      |> IO.iodata_to_binary()
    end
  end
end
