defmodule ExBashkit.Session.Options do
  @moduledoc false
  # Every option of `ExBashkit.Session.new/1`, parsed and validated in one place.
  #
  # `parse!/1` turns the user's keyword list into:
  #
  #   * `:native` - a plain map whose shape the NIF decodes without further
  #     checks (`native/ex_bashkit/src/config.rs`, `SessionConfig`): strings
  #     are valid UTF-8, counts are integers in 0..2^64-1, and so on;
  #   * the Elixir-side capabilities a session carries (builtin functions,
  #     virtual_fs backends, the back-call timeout).
  #
  # A malformed option is a programmer error: it raises `ArgumentError` naming
  # the option and what was wrong.

  alias ExBashkit.Session.{Ceilings, Credentials, Defaults, VfsPath}

  # bashkit 0.20 caps function depth at 16 whatever it is told.
  @max_function_depth 16

  # The one declaration of `:limits`: key, default (as documented: bashkit's
  # own when nil is sent) and doc. The key list, the validation and the docs
  # list in `ExBashkit.Session` are derived from it.
  @limits [
    max_commands:
      {Defaults.doc(Defaults.bashkit_limit(:max_commands)),
       "total commands one script may run (fuel). Assignments count too."},
    max_loop_iterations: {"10_000", "iterations of any single loop."},
    max_total_loop_iterations:
      {"1_000_000",
       "iterations across all loops, defeating the nested-loop multiplication trick."},
    max_function_depth:
      {"16",
       "recursion depth; 16 is also the ceiling (bashkit 0.20 caps it there), " <>
         "above it `new/1` raises."},
    max_input_bytes: {"10_000_000", "maximum script size in bytes."},
    timeout_ms:
      {Defaults.doc(Defaults.bashkit_limit(:timeout_ms)),
       "wall-clock execution timeout in milliseconds (must be >= 1). It holds even for a " <>
         "script that never yields."},
    max_stdout_bytes:
      {"1 MiB",
       "stdout cap; output past it is dropped and the result says so (`stdout_truncated`)."},
    max_stderr_bytes: {"1 MiB", "stderr cap, as `:max_stdout_bytes` (`stderr_truncated`)."},
    max_total_commands:
      {"unlimited",
       "commands across every exec of the session, so work cannot dodge `:max_commands` " <>
         "by being split across calls."},
    max_exec_calls: {"unlimited", "execs over the session's life."},
    max_history_entries:
      {"1,000",
       "commands the `history` builtin keeps, oldest dropped first; 0 keeps none. Once " <>
         "it is full, bashkit 0.20 drops an entry by shifting the whole list, on every " <>
         "exec (about 4 µs at 1,000): a long-lived session that never reads its history " <>
         "runs faster with a low value."},
    max_fs_bytes:
      {"100,000,000",
       "total bytes of all files in the in-memory filesystem; a write past it fails that " <>
         "command (non-zero exit, stderr), as a full disk would. `state/1` reports " <>
         "`fs_usage`."},
    max_files: {"10,000", "files (directories excluded) in the in-memory filesystem, likewise."},
    max_memory_bytes:
      {"512 MiB (a group: its first session's)",
       "heap of the session's worker OS process (`isolation: :process`), enforced as an " <>
         "address-space cap (plus room for thread stacks): past it allocations fail and " <>
         "that process dies, costing only its own session (or group). Ignored in the node."},
    max_file_bytes:
      {"10,000,000",
       "size of one file in the in-memory filesystem; also bounds one read from a host " <>
         "mount. Host mounts and `:virtual_fs` backends are not counted by the quotas."}
  ]

  @limit_keys Keyword.keys(@limits)

  # The one declaration of `new/1`'s options, in the order the docs list
  # them. Each entry: the key, its type and default as documented, the doc,
  # how a given value is validated (`parse`, arity 1, or 2 to see the
  # node-wide ceilings), and where the result goes: `:native` (the map the
  # NIF decodes, `native/ex_bashkit/src/config.rs`; a function there
  # transforms it first) and/or `:session` (a field the Elixir side keeps).
  # The known-option list, defaults, validation, the native map and the
  # options list in `ExBashkit.Session`'s docs are all derived from it: a new
  # option is one entry here plus its field in config.rs.
  #
  # Building the list formats its docs (`Defaults.doc/1`, `inspect/1`), 10 to
  # 20 µs: most of what a `new/1` with options paid for them. So it is built once per loaded
  # version of this module (a reload brings new closures) and kept, with its
  # key list, in a persistent term.
  defp schema, do: elem(schema_and_keys(), 0)

  defp schema_and_keys do
    kept(:schema, __MODULE__.module_info(:md5), fn ->
      schema = build_schema()
      {schema, Enum.map(schema, & &1.key)}
    end)
  end

  # The value kept under `name`, if it was made under `made_under`; else
  # `make.()`, kept from now on.
  defp kept(name, made_under, make) do
    case :persistent_term.get({__MODULE__, name}, nil) do
      {^made_under, value} ->
        value

      _ ->
        value = make.()
        :persistent_term.put({__MODULE__, name}, {made_under, value})
        value
    end
  end

  defp build_schema do
    [
      %{
        key: :env,
        type: "map or keyword list",
        default: [],
        parse: &env!/1,
        native: true,
        doc:
          "environment variables to pre-set. Keys and values are stringified " <>
            "(`env: %{\"LANG\" => \"C\"}` or `env: [LANG: \"C\"]`); keys must be shell " <>
            "variable names (`[A-Za-z_][A-Za-z0-9_]*`)."
      },
      %{
        key: :cwd,
        type: "path",
        default: "/",
        parse: &cwd!/1,
        native: true,
        doc:
          "the starting working directory; created if missing, normalized (`/a/./b/` is " <>
            "`/a/b`); `..` in it, or a path that is a file, raises."
      },
      %{
        key: :username,
        type: "string",
        default: "sandbox",
        parse: &name!(&1, :username),
        native: true,
        doc:
          "the virtual username reported by `whoami`/`id`. No whitespace, control " <>
            "characters, `:`, `/` or `\\` (it is written into the virtual `/etc/passwd`)."
      },
      %{
        key: :hostname,
        type: "string",
        default: "bashkit-sandbox",
        parse: &name!(&1, :hostname),
        native: true,
        doc:
          "the virtual hostname reported by `hostname`/`uname -n`; the characters " <>
            "`:username` refuses are refused here too."
      },
      %{
        key: :files,
        type: "map or keyword list of path => iodata",
        default: [],
        parse: &files!/1,
        native: true,
        doc:
          "files to seed into the virtual filesystem before the first call, creating " <>
            "parent directories as needed; the same as `write_file/3` for each entry."
      },
      %{
        key: :rootfs,
        type: "tar or tar.gz binary, or {:file, host_path}",
        default: nil,
        parse: &rootfs!/1,
        native: true,
        doc:
          "an archive laid into the filesystem before `:files`: directories (empty ones " <>
            "too), files with their modes, symlinks and hard links. The whole archive is " <>
            "checked first; an invalid one, a member named absolutely or with `..`, a " <>
            "relative symlink that climbs above `/`, a hard link to anything but an earlier " <>
            "file of the archive, a device node, or an archive past the filesystem limits " <>
            "raises `ArgumentError`, and no session exists. Absolute symlink targets are " <>
            "kept (they name the session's own paths). Members under `dev/` and `proc/` are " <>
            "skipped. `reset/1` lays it in again. See `export_tar/3` for the other direction."
      },
      %{
        key: :base,
        type: "ExBashkit.Image",
        default: nil,
        parse: &base!/1,
        native: true,
        doc:
          "an image mounted copy-on-write under the session's own layer: reads see the " <>
            "image, writes and deletes stay in this session, `reset/1` returns to the image, " <>
            "and a snapshot holds only this session's layer plus the image's identity. Many " <>
            "sessions share one copy of the image (see `ExBashkit.Image`)."
      },
      %{
        key: :mounts,
        type: "list of {vfs_path, host_path, mode}",
        default: [],
        parse: &mounts!/1,
        native: true,
        doc:
          "host directories mapped into the sandbox, `mode` being `:read_only` or " <>
            "`:read_write` (see \"Host mounts\"). A `vfs_path` (like a `:virtual_fs` path) " <>
            "must be written normalized: `\"/a/./b\"`, `\"/a/../b\"`, `\"//x\"` or a " <>
            "trailing `/` raise, and one path given twice (in any spelling) is a conflict."
      },
      %{
        key: :allowed_mount_paths,
        type: "list of host paths",
        default: nil,
        parse: &allowed_mount_paths!/1,
        native: true,
        doc:
          "host paths under which mounts are allowed; once set, it replaces the built-in " <>
            "denylist of sensitive locations (see \"Host mounts\")."
      },
      %{
        key: :limits,
        type: "keyword list or map",
        default: [],
        parse: &limits!/2,
        native: true,
        doc: "resource limits enforced during execution (see \"Resource limits\")."
      },
      %{
        key: :builtins,
        type: "map of name => fun",
        default: %{},
        parse: &builtins!/1,
        native: &Map.keys/1,
        session: :builtins,
        doc: "Elixir-defined virtual executables a script can invoke (see \"Custom builtins\")."
      },
      %{
        key: :builtin_timeout_ms,
        type: "positive integer",
        default: :ceiling,
        default_doc:
          "#{Defaults.doc(Defaults.get(:builtin_timeout_ms))}, or the node-wide ceiling if lower",
        parse: &Ceilings.builtin_timeout_ms!(&1, &2),
        session: :callback_timeout_ms,
        doc:
          "how long one custom-builtin back-call may run before it is abandoned and its " <>
            "process killed (at most 4 294 967 295). Also bounds `:virtual_fs` back-calls."
      },
      %{
        key: :max_reply_bytes,
        type: "positive integer",
        default: :ceiling,
        default_doc:
          "#{Defaults.doc(Defaults.get(:max_reply_bytes))}, or the node-wide ceiling if lower",
        parse: &Ceilings.max_reply_bytes!(&1, &2),
        session: :max_reply_bytes,
        doc:
          "the most bytes one back-call may send back into the interpreter: a builtin's " <>
            "stdout plus stderr, a `:virtual_fs` read, a listing (names plus 64 bytes per " <>
            "entry), an error message (there is no unlimited). Over it, that command fails " <>
            "with a message naming `:max_reply_bytes`, and the data is never copied into " <>
            "the interpreter."
      },
      %{
        key: :virtual_fs,
        type: "map of mount_path => backend",
        default: %{},
        parse: &virtual_fs!/1,
        native: &Map.keys/1,
        session: :virtual_fs,
        doc:
          "Elixir-backed filesystems whose reads and writes your application serves (see " <>
            "\"Virtual filesystem backends\" and `ExBashkit.VirtualFs`)."
      },
      %{
        key: :allow_net,
        type: "list of URL patterns, or :all",
        default: nil,
        parse: &allow_net!/1,
        native: {:merge, fn {patterns, all} -> %{allow_net: patterns, allow_all_net: all} end},
        doc:
          "URL patterns `curl`, `wget` and `http` may reach, or `:all` (see \"Network " <>
            "access\"). Omitted, there is no network."
      },
      %{
        key: :block_private_ips,
        type: "boolean",
        default: true,
        parse: &boolean!(&1, :block_private_ips),
        native: true,
        doc:
          "refuse requests to private and reserved addresses even when allowlisted (see " <>
            "\"Network access\")."
      },
      %{
        key: :credentials,
        type: "list of {url_prefix, spec}",
        default: [],
        parse: &Credentials.parse!/1,
        native: true,
        doc:
          "secrets added to requests at the network boundary, never seen by the script " <>
            "(see \"Credentials\"). `spec`: `bearer: token`, `header: {name, value}` or " <>
            "`headers: [{name, value}]`, optionally with `placeholder: \"ENV_NAME\"`. Each " <>
            "prefix must lie within `:allow_net`."
      },
      %{
        key: :egress,
        type: "fun/1 or {module, arg}",
        default: nil,
        parse: &ExBashkit.Egress.parse!/1,
        native: &(&1 != nil),
        session: :egress,
        doc:
          "decides each request `:allow_net` admitted, `:allow` or `:deny`, within " <>
            "`:builtin_timeout_ms` (see `ExBashkit.Egress`); every exec's result lists its " <>
            "requests in `:requests`."
      },
      %{
        key: :python,
        type: "boolean or keyword list",
        default: false,
        parse: &python!/1,
        native: true,
        doc:
          "`true` (or `[name: ...]` / `[names: [...]]`) registers a sandboxed " <>
            "`python`/`python3` builtin that shares the session filesystem (see " <>
            "`ExBashkit.Python`)."
      },
      %{
        key: :git,
        type: "boolean or keyword list",
        default: false,
        parse: &git!/1,
        native: true,
        doc:
          "`true`, or `[author: {name, email}, remotes: [url_pattern]]`, registers bashkit's " <>
            "virtual `git` on the session filesystem (its state is the `.git` directory). " <>
            "Commits are by the author given, else `sandbox <sandbox@bashkit.local>`, never " <>
            "the host's; each remote pattern must lie within `:allow_net` and its private-IP " <>
            "rule (see `ExBashkit.Git`)."
      },
      %{
        key: :sqlite,
        type: "boolean",
        default: false,
        parse: &boolean!(&1, :sqlite),
        native: true,
        doc:
          "`true` registers `sqlite3` (and `sqlite`), an embedded SQLite engine whose " <>
            "database files live in the session filesystem (see `ExBashkit.Sqlite`)."
      },
      %{
        key: :typescript,
        type: "boolean",
        default: false,
        parse: &boolean!(&1, :typescript),
        native: true,
        doc:
          "`true` registers `ts` (and `typescript`, `node`, `deno`, `bun`), an embedded " <>
            "TypeScript/JavaScript interpreter (see `ExBashkit.TypeScript`)."
      },
      %{
        key: :commands,
        type: "[allow: names] or [deny: names]",
        default: nil,
        parse: &commands!/1,
        native: true,
        doc:
          "the commands the session has. One outside the policy does not exist, on every " <>
            "route to it (`command`, `env`, `xargs`, `find -exec`, `eval`, `bash -c`, " <>
            "`source`, functions, aliases, `/usr/bin/NAME`, `timeout`, `time`): \"command " <>
            "not found\", exit 127, and `which`/`type`/`command -v` do not list it. Custom " <>
            "`:builtins`, `:python`, `:git`, `:sqlite` and `:typescript` obey it. The shell's own builtins (`cd`, `echo`, " <>
            "`eval`, `source`, `bash`, ...) are always there: `allow:` may name them (it changes " <>
            "nothing), and naming one in `deny:` raises `ArgumentError` (it cannot be denied)."
      },
      %{
        key: :soft_delete,
        type: "boolean or [trash: path]",
        default: false,
        parse: &soft_delete!/1,
        native: true,
        doc:
          "`true` (trash at `/.trash`) or `[trash: path]`: deletes and overwrites in the " <>
            "in-memory filesystem keep the old content in the trash (see `trash/1` and " <>
            "`undelete/2`). Host and `:virtual_fs` mounts are outside it: deletes there are real."
      },
      %{
        key: :durable,
        type: "boolean",
        default: true,
        parse: &boolean!(&1, :durable),
        native: true,
        doc:
          "with `isolation: :process`, each exec that changed the session's state leaves " <>
            "it recoverable before its answer (a recovery point kept outside that process, " <>
            "its files in `ExBashkit.Store`): when " <>
            "the session's OS process dies, the exec in flight answers `reason: :crashed` and " <>
            "the session comes back on a new process as it was before that exec. `false` " <>
            "pays nothing and keeps no point: such a session is rebuilt from its `new/1` " <>
            "options and its next call answers `reason: :lost` (once). Not available over a " <>
            "`:base` image yet (lost, as with `false`). Ignored in the node."
      },
      %{
        key: :group,
        type: "any term",
        default: nil,
        parse: &Function.identity/1,
        session: :group,
        doc:
          "with `isolation: :process`, the sessions given the same group (one tenant, one " <>
            "agent's helpers) share worker OS processes of their own, never a process with " <>
            "a session of another group or a session without one: a crash of a group's " <>
            "process costs only that group. Without `:group` a session has a process of its " <>
            "own. Bounded by " <>
            "`config :ex_bashkit, max_worker_processes:` (see `ExBashkit.WorkerPool`)."
      },
      %{
        key: :isolation,
        type: ":process or :in_node",
        default: &default_isolation/0,
        default_doc: "config `:isolation`, else `:process`",
        parse: &isolation!/1,
        session: :isolation,
        doc:
          "where the interpreter runs: a worker OS process (`:process`) or this VM " <>
            "(`:in_node`, for trusted scripts only); see \"Isolation\" in the README."
      }
    ]
  end

  @type parsed :: %{
          native: map(),
          isolation: :process | :in_node,
          builtins: %{optional(String.t()) => (map() -> term())},
          virtual_fs: %{optional(String.t()) => term()},
          callback_timeout_ms: pos_integer(),
          max_reply_bytes: pos_integer(),
          egress: ExBashkit.Egress.decider() | nil
        }

  @doc false
  @spec limit_keys() :: [atom()]
  def limit_keys, do: @limit_keys

  @doc false
  @spec known_options() :: [atom()]
  def known_options, do: elem(schema_and_keys(), 1)

  @doc false
  # The options list of `ExBashkit.Session`'s moduledoc, from the schema.
  @spec docs() :: String.t()
  def docs do
    Enum.map_join(schema(), "\n", fn entry ->
      default =
        case Map.get(entry, :default_doc, entry.default) do
          empty when empty in [nil, [], %{}, false] -> ""
          text when is_binary(text) and is_map_key(entry, :default_doc) -> "; default #{text}"
          value -> "; default `#{inspect(value)}`"
        end

      bullet("`#{inspect(entry.key)}` (#{entry.type}#{default}) - #{entry.doc}")
    end)
  end

  @doc false
  # The limits list of `ExBashkit.Session`'s moduledoc, from `@limits`.
  @spec limits_docs() :: String.t()
  def limits_docs do
    Enum.map_join(@limits, "\n", fn {key, {default, doc}} ->
      bullet("`#{inspect(key)}` (default #{default}) - #{doc}")
    end)
  end

  # A markdown bullet wrapped at 80 columns, indented for a moduledoc.
  defp bullet(text) do
    text
    |> String.split(" ")
    |> Enum.reduce({[], "  * "}, fn word, {lines, line} ->
      if String.length(line) + String.length(word) + 1 > 80 and
           String.trim(line) not in ["*", ""],
         do: {[String.trim_trailing(line) | lines], "    " <> word <> " "},
         else: {lines, line <> word <> " "}
    end)
    |> then(fn {lines, line} -> Enum.reverse([String.trim_trailing(line) | lines]) end)
    |> Enum.join("\n")
  end

  @doc false
  # `parse!([])`, the configuration of `new/0` and `ExBashkit.exec/1`.
  @spec parse_default!() :: parsed()
  def parse_default!, do: defaults(Ceilings.read!())

  @doc false
  # Each option is parsed from its own value alone (and the node's ceilings),
  # so the options left out keep their parsed defaults (`defaults/1`) and
  # only the given ones are parsed: an option costs what its own check costs.
  @spec parse!(term()) :: parsed()
  def parse!(opts) do
    opts = to_keyword!(opts, "options")
    {schema, known} = schema_and_keys()

    for {key, _} <- opts, key not in known do
      raise ArgumentError,
            "unknown option #{inspect(key)} for ExBashkit.Session.new/1; " <>
              "known options: #{Enum.map_join(known, ", ", &inspect/1)}"
    end

    ceilings = Ceilings.read!()
    default = defaults(ceilings)

    # In the schema's order, so that of two bad options the first listed
    # raises; a key given twice counts once, the first time (`Keyword.get/2`).
    {native, session} =
      Enum.reduce(schema, {default.native, Map.delete(default, :native)}, fn entry, acc ->
        case List.keyfind(opts, entry.key, 0) do
          nil -> acc
          {_, value} -> put_entry(acc, entry, parse_entry(entry, value, ceilings))
        end
      end)

    check_mount_conflicts!(native.mounts, session.virtual_fs)
    python_conflict!(native.python, session.builtins)
    Map.put(session, :native, native)
  end

  # Every option at its default, as parsed under `ceilings` and the node's
  # default isolation (run-time configuration). Parsing them is ~12 µs, a
  # fair part of a `new/1`, so the result is kept in a persistent term with
  # the configuration (and the version of this module) it was parsed under,
  # and parsed again when that changes.
  defp defaults(ceilings) do
    config = {ceilings, default_isolation(), __MODULE__.module_info(:md5)}

    kept(:default, config, fn ->
      {native, session} =
        Enum.reduce(schema(), {%{}, %{}}, fn entry, acc ->
          put_entry(acc, entry, parse_entry(entry, :default, ceilings))
        end)

      Map.put(session, :native, native)
    end)
  end

  defp put_entry({native, session}, entry, value),
    do: {put_native(native, entry, value), put_session(session, entry, value)}

  defp parse_entry(%{parse: parse}, value, ceilings) when is_function(parse, 2),
    do: parse.(value, ceilings)

  defp parse_entry(%{parse: parse} = entry, :default, _ceilings),
    do: parse.(default_value(entry.default))

  defp parse_entry(%{parse: parse}, value, _ceilings), do: parse.(value)

  defp default_value(fun) when is_function(fun, 0), do: fun.()
  defp default_value(value), do: value

  defp put_native(native, %{native: true, key: key}, value), do: Map.put(native, key, value)

  defp put_native(native, %{native: {:merge, fun}}, value), do: Map.merge(native, fun.(value))

  defp put_native(native, %{native: fun, key: key}, value) when is_function(fun, 1),
    do: Map.put(native, key, fun.(value))

  defp put_native(native, _entry, _value), do: native

  defp put_session(session, %{session: field}, value), do: Map.put(session, field, value)
  defp put_session(session, _entry, _value), do: session

  @doc false
  # Where sessions run unless `:isolation` says otherwise:
  # `config :ex_bashkit, isolation: :process | :in_node` (default `:process`).
  @spec default_isolation() :: :process | :in_node
  def default_isolation do
    case Application.get_env(:ex_bashkit, :isolation, :process) do
      mode when mode in [:process, :in_node] ->
        mode

      other ->
        raise ArgumentError,
              "config :ex_bashkit, :isolation must be :process or :in_node, got: #{inspect(other)}"
    end
  end

  defp isolation!(mode) when mode in [:process, :in_node], do: mode

  defp isolation!(other),
    do: raise(ArgumentError, ":isolation must be :process or :in_node, got: #{inspect(other)}")

  @doc false
  # Whether building `native` touches neither the host nor large data, so
  # the NIF may build it on the calling scheduler (tens of microseconds).
  # The one place this is decided.
  @spec inline?(map()) :: boolean()
  def inline?(native) do
    match?(
      %{files: [], mounts: [], allowed_mount_paths: nil, cwd: "/", rootfs: nil, base: nil},
      native
    ) and
      native.python == [] and native.virtual_fs == [] and native.builtins == [] and
      native.git == nil and not native.sqlite and not native.typescript and not native.egress
  end

  # -- generic shapes ---------------------------------------------------------

  defp to_keyword!(opts, what) when is_list(opts) do
    case Enum.find(opts, &(not match?({key, _} when is_atom(key), &1))) do
      nil ->
        opts

      # Only the entry at fault, and of a pair only its key: the others may
      # hold `:credentials`.
      {key, _} ->
        raise ArgumentError,
              "#{what} must be a keyword list, got an entry with key #{inspect(key)}"

      entry ->
        raise ArgumentError, "#{what} must be a keyword list, got the entry #{inspect(entry)}"
    end
  end

  defp to_keyword!(%{} = opts, what) when not is_struct(opts),
    do: to_keyword!(Map.to_list(opts), what)

  defp to_keyword!(opts, what),
    do: raise(ArgumentError, "#{what} must be a keyword list, got: #{inspect(opts)}")

  # A map or a list of pairs, as a list of pairs.
  defp pairs!(%{} = map, _option) when not is_struct(map), do: Map.to_list(map)

  defp pairs!(list, option) when is_list(list) do
    Enum.map(list, fn
      {key, value} ->
        {key, value}

      other ->
        raise ArgumentError,
              "#{inspect(option)} entries must be {key, value} pairs, got: #{inspect(other)}"
    end)
  end

  defp pairs!(other, option),
    do:
      raise(
        ArgumentError,
        "#{inspect(option)} must be a map or a keyword list, got: #{inspect(other)}"
      )

  defp string!(value, what) when is_binary(value) do
    cond do
      not String.valid?(value) ->
        raise ArgumentError, "#{what} must be valid UTF-8, got: #{inspect(value)}"

      String.contains?(value, <<0>>) ->
        raise ArgumentError, "#{what} must not contain NUL bytes, got: #{inspect(value)}"

      true ->
        value
    end
  end

  defp string!(value, what),
    do: raise(ArgumentError, "#{what} must be a string, got: #{inspect(value)}")

  # Keys and values of `:env` are stringified: atoms, strings, numbers.
  defp stringify!(value, what) when is_binary(value), do: string!(value, what)

  defp stringify!(value, what) when is_atom(value) and not is_nil(value),
    do: string!(Atom.to_string(value), what)

  defp stringify!(value, _what) when is_integer(value), do: Integer.to_string(value)
  defp stringify!(value, _what) when is_float(value), do: Float.to_string(value)

  defp stringify!(value, what),
    do: raise(ArgumentError, "#{what} must be a string, atom or number, got: #{inspect(value)}")

  defp boolean!(value, _option) when is_boolean(value), do: value

  defp boolean!(value, option),
    do: raise(ArgumentError, "#{inspect(option)} must be a boolean, got: #{inspect(value)}")

  # A path as given (string or charlist), validated as a string.
  defp path!(path, what) when is_list(path) do
    path!(List.to_string(path), what)
  rescue
    e in [ArgumentError, UnicodeConversionError] ->
      reraise ArgumentError,
              "#{what} must be a path, got: #{inspect(path)} (#{Exception.message(e)})",
              __STACKTRACE__
  end

  defp path!(path, what) when is_binary(path) do
    path = string!(path, what)
    if path == "", do: raise(ArgumentError, "#{what} must not be empty")
    path
  end

  defp path!(path, what),
    do: raise(ArgumentError, "#{what} must be a path string, got: #{inspect(path)}")

  defp absolute_path!(path, what) do
    case path!(path, what) do
      "/" <> _ = abs ->
        abs

      rel ->
        raise ArgumentError,
              "#{what} must be an absolute path (start with /), got: #{inspect(rel)}"
    end
  end

  # Paths inside the sandbox: relative ones are rooted at `/`.
  defp vfs_path!(path, what) do
    case path!(path, what) do
      "/" <> _ = abs -> abs
      rel -> "/" <> rel
    end
  end

  # -- individual options -----------------------------------------------------

  # Only names a script can use: `$(id)` or `A B` could never be read as a
  # variable, and would reach `env` output and child environments verbatim.
  defp env!(env) do
    for {key, value} <- pairs!(env, :env) do
      key = stringify!(key, ":env key")

      unless key =~ ~r/\A[A-Za-z_][A-Za-z0-9_]*\z/ do
        raise ArgumentError,
              ":env key must be a shell variable name (letters, digits and _, not starting " <>
                "with a digit), got: #{inspect(key)}"
      end

      {key, stringify!(value, ":env value for #{key}")}
    end
  end

  # `:username` and `:hostname` end up in the virtual /etc/passwd, /etc/hosts,
  # $HOME and prompts: a newline or a colon would forge extra entries or
  # fields there, a slash would move $HOME.
  defp name!(value, option) do
    # `":" <> name`, not `inspect/1`, which costs µs on every `new/1`.
    value = string!(value, ":#{option}")
    if value == "", do: raise(ArgumentError, "#{inspect(option)} must not be empty")

    if value =~ ~r{[\s:/\\]|[\x00-\x1f\x7f]}u do
      raise ArgumentError,
            "#{inspect(option)} must not contain whitespace, control characters, ':', '/' " <>
              "or '\\', got: #{inspect(value)}"
    end

    value
  end

  # The start directory, normalized (`pwd` must print a clean path): `.` and
  # repeated or trailing slashes go; `..` is refused rather than guessed.
  # Whether it names a file is checked natively, once mounts are attached.
  defp cwd!(cwd) do
    cwd = absolute_path!(cwd, ":cwd")

    if ".." in String.split(cwd, "/") do
      raise ArgumentError, ":cwd must not contain .. segments, got: #{inspect(cwd)}"
    end

    VfsPath.normalize(cwd)
  end

  @doc false
  # `:files` (also `ExBashkit.Image.build/1`'s): `[{path, binary}]`.
  @spec files!(term()) :: [{String.t(), binary()}]
  def files!(files) do
    for {path, content} <- pairs!(files, :files) do
      # A keyword list (`files: ["/a.txt": "x"]`) has atom paths.
      path = if is_atom(path) and path != nil, do: Atom.to_string(path), else: path
      path = vfs_path!(path, ":files path")

      content =
        try do
          IO.iodata_to_binary(content)
        rescue
          ArgumentError ->
            raise ArgumentError,
                  ":files content for #{path} must be iodata, got: #{inspect(content)}"
        end

      {path, content}
    end
  end

  # The session's wall-clock limit is bounded by the node-wide ceiling.
  defp limits!(:default, ceilings), do: limits!([], ceilings)

  defp limits!(limits, ceilings) do
    limits
    |> limits!()
    |> Map.update!(:timeout_ms, &Ceilings.session_timeout_ms!(&1, ceilings))
  end

  @doc false
  # `:rootfs` (also `ExBashkit.Image.build/1`'s): the archive's bytes, read
  # here when given as `{:file, path}`. Its content is checked natively.
  @spec rootfs!(term()) :: binary() | nil
  def rootfs!(nil), do: nil
  def rootfs!(tar) when is_binary(tar), do: tar

  def rootfs!({:file, path}) when is_binary(path) do
    case File.read(path) do
      {:ok, tar} ->
        tar

      {:error, reason} ->
        raise ArgumentError, ":rootfs file #{path}: #{:file.format_error(reason)}"
    end
  end

  def rootfs!(other),
    do:
      raise(
        ArgumentError,
        ":rootfs must be a tar or tar.gz binary or {:file, path}, got: #{inspect(other)}"
      )

  # `:base`: the image travels as its id; `ExBashkit.Backend` brings the
  # image itself where the session is built.
  defp base!(nil), do: nil
  defp base!(%ExBashkit.Image{} = image), do: image

  defp base!(other),
    do: raise(ArgumentError, ":base must be an ExBashkit.Image, got: #{inspect(other)}")

  defp limits!(limits) do
    given = pairs!(limits, :limits)

    Enum.each(given, fn {key, value} ->
      cond do
        key not in @limit_keys ->
          raise ArgumentError,
                "unknown limit #{inspect(key)}; known limits: #{Enum.map_join(@limit_keys, ", ", &inspect/1)}"

        not is_integer(value) or value < 0 ->
          raise ArgumentError,
                "limit #{inspect(key)} must be a non-negative integer, got: #{inspect(value)}"

        key == :timeout_ms and value < 1 ->
          raise ArgumentError, "limit :timeout_ms must be >= 1, got: #{inspect(value)}"

        # A higher value would be silently lowered.
        key == :max_function_depth and value > @max_function_depth ->
          raise ArgumentError,
                "limit :max_function_depth can be at most #{@max_function_depth} " <>
                  "(bashkit's own ceiling), got: #{value}"

        true ->
          :ok
      end
    end)

    # Past the platform maximum means "unlimited": clamp to u64.
    Map.new(@limit_keys, fn key ->
      case List.keyfind(given, key, 0) do
        {^key, value} -> {key, Defaults.clamp_u64(value)}
        nil -> {key, nil}
      end
    end)
  end

  # Shape and mode only: whether the host path exists, is a directory and may
  # be mounted is decided natively (`native/ex_bashkit/src/fs/mounts.rs`), and a
  # refusal raises from `new/1` too.
  defp mounts!(mounts) when is_list(mounts) do
    parsed =
      Enum.map(mounts, fn
        {vfs_path, host_path, mode} = mount ->
          vfs =
            vfs_path
            |> absolute_path!("mount #{inspect(mount)}: vfs path")
            |> normalized_mount_path!("mount #{inspect(mount)}: vfs path")

          host = absolute_path!(host_path, "mount #{inspect(mount)}: host path")

          if vfs == "/" do
            raise ArgumentError,
                  "mount #{inspect(mount)}: cannot mount a host directory at /; " <>
                    "pick a directory such as \"/data\""
          end

          writable =
            case mode do
              :read_only ->
                false

              :read_write ->
                true

              other ->
                raise ArgumentError,
                      "mount #{inspect(mount)}: unknown mode #{inspect(other)} " <>
                        "(expected :read_only or :read_write)"
            end

          %{vfs_path: vfs, host_path: host, writable: writable}

        other ->
          raise ArgumentError,
                ":mounts entries must be {vfs_path, host_path, :read_only | :read_write}, " <>
                  "got: #{inspect(other)}"
      end)

    # Two mounts at one place: the later would silently hide the earlier.
    parsed
    |> Enum.frequencies_by(& &1.vfs_path)
    |> Enum.each(fn
      {vfs, count} when count > 1 ->
        raise ArgumentError, ":mounts has #{count} mounts at #{vfs}; one path takes one mount"

      _ ->
        :ok
    end)

    parsed
  end

  defp mounts!(other), do: raise(ArgumentError, ":mounts must be a list, got: #{inspect(other)}")

  # A mount point (`:mounts` or `:virtual_fs`) must be written in its one
  # normal form: no ".", "..", empty segment or trailing "/". Rewriting
  # "/a/../b" behind the user's back would hide a typo (or an attempt to
  # reach outside what a reviewer read) and let two spellings of one path
  # become two mounts.
  defp normalized_mount_path!(path, what) do
    unless VfsPath.normal?(path) do
      raise ArgumentError,
            "#{what} must be normalized (no \".\", \"..\", \"//\" or trailing \"/\"), " <>
              "got: #{inspect(path)}"
    end

    path
  end

  # The same mount point given twice (a key repeated in a list, or a string
  # and a charlist spelling of one path) is a conflict, not "the last wins".
  defp check_duplicate_mount_paths!(paths, option) do
    paths
    |> Enum.frequencies()
    |> Enum.each(fn
      {path, count} when count > 1 ->
        raise ArgumentError,
              "#{option} gives #{path} #{count} times (spellings of one path conflict); " <>
                "one path takes one mount"

      _ ->
        :ok
    end)
  end

  # A host mount and a :virtual_fs backend at the same path would shadow one
  # another depending on mount order.
  defp check_mount_conflicts!(mounts, virtual_fs) do
    for %{vfs_path: vfs} <- mounts, Map.has_key?(virtual_fs, vfs) do
      raise ArgumentError,
            "#{vfs} is both a host mount (:mounts) and a :virtual_fs mount; one path takes one mount"
    end

    :ok
  end

  defp allowed_mount_paths!(nil), do: nil

  defp allowed_mount_paths!(paths) when is_list(paths),
    do: Enum.map(paths, &absolute_path!(&1, ":allowed_mount_paths entry"))

  defp allowed_mount_paths!(other),
    do:
      raise(ArgumentError, ":allowed_mount_paths must be a list of paths, got: #{inspect(other)}")

  defp allow_net!(nil), do: {nil, false}
  defp allow_net!(:all), do: {nil, true}

  defp allow_net!([]), do: {nil, false}

  defp allow_net!(patterns) when is_list(patterns) do
    {Enum.map(patterns, &url_pattern!/1), false}
  end

  defp allow_net!(other),
    do:
      raise(
        ArgumentError,
        ":allow_net must be a list of URL patterns or :all, got: #{inspect(other)}"
      )

  # A string here; whether it is a URL prefix is decided by the parser that
  # enforces it (`native/ex_bashkit/src/policy/net.rs`, `check_pattern`): a second
  # parser here could only disagree with it. A refusal raises from `new/1`.
  defp url_pattern!(pattern), do: string!(pattern, ":allow_net pattern")

  defp builtins!(builtins) do
    Map.new(pairs!(builtins, :builtins), fn {name, fun} ->
      name = builtin_name!(name)

      unless name =~ ~r/\A[A-Za-z0-9_][A-Za-z0-9_.+-]*\z/ do
        raise ArgumentError, ":builtins name #{inspect(name)} is not a valid command name"
      end

      unless is_function(fun, 1) do
        raise ArgumentError, ":builtins #{name} must be a 1-arity function, got: #{inspect(fun)}"
      end

      {name, fun}
    end)
  end

  # Mount paths are normalized like host mounts' (`"/api/."` is `/api`), so
  # two spellings of one place cannot shadow each other or a host mount.
  defp virtual_fs!(mounts) do
    parsed =
      Enum.map(pairs!(mounts, :virtual_fs), fn {path, backend} ->
        path = absolute_path!(path, ":virtual_fs mount path")

        if path == "/" do
          raise ArgumentError, ":virtual_fs cannot mount a backend at /"
        end

        path = normalized_mount_path!(path, ":virtual_fs mount path")
        {path, backend!(path, backend)}
      end)

    check_duplicate_mount_paths!(Enum.map(parsed, &elem(&1, 0)), ":virtual_fs")
    Map.new(parsed)
  end

  # A command name is a string: an atom key (`%{greet: fun}`) is a mistake
  # that would otherwise register a name the caller did not write.
  defp builtin_name!(name) when is_binary(name), do: string!(name, ":builtins name")

  defp builtin_name!(name),
    do: raise(ArgumentError, ":builtins name must be a string, got: #{inspect(name)}")

  defp backend!(_path, fun) when is_function(fun, 1), do: fun

  defp backend!(path, {module, _arg} = backend) when is_atom(module) do
    ensure_backend!(path, module)
    backend
  end

  defp backend!(path, module) when is_atom(module) and not is_nil(module) do
    ensure_backend!(path, module)
    module
  end

  defp backend!(path, other) do
    raise ArgumentError,
          ":virtual_fs backend for #{path} must be a 1-arity function, a module implementing " <>
            "ExBashkit.VirtualFs or {module, arg}, got: #{inspect(other)}"
  end

  defp ensure_backend!(path, module) do
    unless Code.ensure_loaded?(module) and ExBashkit.VirtualFs.Dispatch.implemented?(module) do
      raise ArgumentError,
            ":virtual_fs backend for #{path}: #{inspect(module)} does not implement ExBashkit.VirtualFs"
    end
  end

  # A custom builtin under a name `:python` takes would be silently replaced.
  defp python_conflict!(python_names, builtins) do
    case Enum.filter(python_names, &Map.has_key?(builtins, &1)) do
      [] ->
        :ok

      names ->
        raise ArgumentError,
              ":python takes the command name(s) #{inspect(names)}, which :builtins also defines; " <>
                "rename the builtin or use python: [name: ...]"
    end
  end

  # `[allow: names]` or `[deny: names]`, one of the two: which commands the
  # session has (`native/ex_bashkit/src/policy/commands.rs`). Shape here; a name that
  # is a shell builtin (always present) is refused natively, where the list
  # of them lives.
  defp commands!(nil), do: nil

  defp commands!(policy) when is_list(policy) do
    case policy do
      [allow: names] -> %{allow: command_names!(names, :allow), deny: []}
      [deny: names] -> %{allow: nil, deny: command_names!(names, :deny)}
      _ -> commands_shape_error!(policy)
    end
  end

  defp commands!(other), do: commands_shape_error!(other)

  defp commands_shape_error!(policy) do
    raise ArgumentError,
          ":commands must be [allow: [names]] or [deny: [names]] (one of the two), " <>
            "got: #{inspect(policy)}"
  end

  defp command_names!(names, key) when is_list(names) do
    Enum.map(names, fn
      name when is_binary(name) ->
        name = string!(name, ":commands #{key} name")

        unless name =~ ~r/\A[A-Za-z0-9_][A-Za-z0-9_.+-]*\z/ or name in ["[", ".", ":"] do
          raise ArgumentError,
                ":commands #{key} name #{inspect(name)} is not a command name " <>
                  "(no paths, spaces or shell syntax)"
        end

        name

      other ->
        raise ArgumentError,
              ":commands #{key} names must be strings, got: #{inspect(other)}"
    end)
  end

  defp command_names!(other, key),
    do:
      raise(
        ArgumentError,
        ":commands #{key} must be a list of command names, got: #{inspect(other)}"
      )

  # `true` (trash at /.trash), `[trash: path]`, or `false`: the trash
  # directory, or nil. Deletes and overwrites then keep the old content
  # there (`native/ex_bashkit/src/session/trash.rs`).
  @default_trash "/.trash"

  defp soft_delete!(false), do: nil
  defp soft_delete!(true), do: @default_trash

  defp soft_delete!(opts) when is_list(opts) do
    case opts do
      [trash: path] ->
        path = absolute_path!(path, ":soft_delete trash")
        path = normalized_mount_path!(path, ":soft_delete trash")

        if path == "/" do
          raise ArgumentError, ":soft_delete trash cannot be /"
        end

        path

      other ->
        raise ArgumentError,
              ":soft_delete must be a boolean or [trash: path], got: #{inspect(other)}"
    end
  end

  defp soft_delete!(other),
    do:
      raise(
        ArgumentError,
        ":soft_delete must be a boolean or [trash: path], got: #{inspect(other)}"
      )

  defp python!(false), do: []
  defp python!(true), do: ["python", "python3"]

  defp python!(opts) when is_list(opts) do
    names =
      case to_keyword!(opts, ":python") do
        [name: name] ->
          [name]

        [names: names] when is_list(names) and names != [] ->
          names

        other ->
          raise ArgumentError,
                ":python must be true, [name: name] or [names: [...]], got: #{inspect(other)}"
      end

    Enum.map(names, &name!(&1, :python))
  end

  defp python!(other),
    do:
      raise(ArgumentError, ":python must be a boolean or a keyword list, got: #{inspect(other)}")

  # bashkit's virtual identity, the author of commits when `:git` names none.
  @default_git_author {"sandbox", "sandbox@bashkit.local"}

  # `:git`: `nil` (not granted) or `%{author_name:, author_email:, remotes:}`.
  # Whether each remote lies within the session's network access is decided
  # natively (`commands/tools.rs`), with the parser and allowlist `:allow_net` uses.
  defp git!(false), do: nil
  defp git!(true), do: git!([])

  defp git!(opts) when is_list(opts) do
    unless Enum.all?(opts, &match?({key, _} when key in [:author, :remotes], &1)) do
      raise ArgumentError,
            ":git must be true or a keyword list with :author and :remotes, got: #{inspect(opts)}"
    end

    {name, email} = git_author!(Keyword.get(opts, :author, @default_git_author))

    %{
      author_name: name,
      author_email: email,
      remotes: git_remotes!(Keyword.get(opts, :remotes, []))
    }
  end

  defp git!(other),
    do:
      raise(
        ArgumentError,
        ":git must be a boolean or a keyword list ([author: {name, email}, remotes: [url]]), " <>
          "got: #{inspect(other)}"
      )

  # The identity ends up in `.git/config` and in bashkit's commit records,
  # whose fields are `|`-separated lines: a newline, a `|` or a control
  # character would forge entries there; `<` and `>` would make the
  # "Name <email>" of `git log` ambiguous.
  defp git_author!({name, email}) do
    name = git_identity!(name, "name")
    email = git_identity!(email, "email")

    if email =~ ~r/\s/u do
      raise ArgumentError, ":git author email must not contain whitespace, got: #{inspect(email)}"
    end

    {name, email}
  end

  defp git_author!(other),
    do:
      raise(
        ArgumentError,
        ":git author must be a {name, email} tuple of strings, got: #{inspect(other)}"
      )

  defp git_identity!(value, what) do
    value = string!(value, ":git author #{what}")

    cond do
      String.trim(value) == "" ->
        raise ArgumentError, ":git author #{what} must not be empty"

      value =~ ~r/[|<>]|[\x00-\x1f\x7f]/u ->
        raise ArgumentError,
              ":git author #{what} must not contain '|', '<', '>' or control characters, " <>
                "got: #{inspect(value)}"

      true ->
        value
    end
  end

  # Strings here; whether each is a URL prefix is decided natively by the
  # parser `:allow_net` patterns go through (`policy/net.rs`), as for those.
  defp git_remotes!(patterns) when is_list(patterns),
    do: Enum.map(patterns, &string!(&1, ":git remote"))

  defp git_remotes!(other),
    do:
      raise(ArgumentError, ":git remotes must be a list of URL patterns, got: #{inspect(other)}")
end
