defmodule ExBashkit.Session.Options do
  @moduledoc false
  # Every option of `ExBashkit.Session.new/1`, parsed and validated in one place.
  #
  # `parse!/1` turns the user's keyword list into:
  #
  #   * `:native` - a plain map whose shape the NIF decodes without further
  #     checks (`native/ex_bashkit/src/options.rs`, `SessionConfig`): strings
  #     are valid UTF-8, counts are integers in 0..2^64-1, and so on;
  #   * the Elixir-side capabilities a session carries (builtin functions,
  #     virtual_fs backends, the back-call timeout).
  #
  # A malformed option is a programmer error: it raises `ArgumentError` naming
  # the option and what was wrong.

  alias ExBashkit.Session.Ceilings

  @u64_max 0xFFFF_FFFF_FFFF_FFFF

  @limit_keys [
    :max_commands,
    :max_loop_iterations,
    :max_total_loop_iterations,
    :max_function_depth,
    :max_input_bytes,
    :timeout_ms,
    :max_stdout_bytes,
    :max_stderr_bytes,
    :max_total_commands,
    :max_exec_calls
  ]

  @known [
    :env,
    :cwd,
    :username,
    :hostname,
    :files,
    :mounts,
    :allowed_mount_paths,
    :limits,
    :allow_net,
    :block_private_ips,
    :builtins,
    :builtin_timeout_ms,
    :virtual_fs,
    :python,
    :isolation,
    :max_reply_bytes,
    :commands,
    :soft_delete
  ]

  @max_function_depth 16

  @type parsed :: %{
          native: map(),
          isolation: :process | :in_node,
          builtins: %{optional(String.t()) => (map() -> term())},
          virtual_fs: %{optional(String.t()) => term()},
          callback_timeout_ms: pos_integer(),
          max_reply_bytes: pos_integer()
        }

  @doc false
  @spec limit_keys() :: [atom()]
  def limit_keys, do: @limit_keys

  @doc false
  @spec known_options() :: [atom()]
  def known_options, do: @known

  @doc false
  @spec parse!(term()) :: parsed()
  def parse!(opts) do
    opts = to_keyword!(opts, "options")

    for {key, _} <- opts, key not in @known do
      raise ArgumentError,
            "unknown option #{inspect(key)} for ExBashkit.Session.new/1; " <>
              "known options: #{Enum.map_join(@known, ", ", &inspect/1)}"
    end

    builtins = builtins!(Keyword.get(opts, :builtins, %{}))
    virtual_fs = virtual_fs!(Keyword.get(opts, :virtual_fs, %{}))
    {timeout, max_reply_bytes, limits} = bounded_options!(opts)

    {allow_net, allow_all_net} = allow_net!(Keyword.get(opts, :allow_net))
    mounts = mounts!(Keyword.get(opts, :mounts, []))
    check_mount_conflicts!(mounts, virtual_fs)

    native = %{
      env: env!(Keyword.get(opts, :env, [])),
      cwd: cwd!(Keyword.get(opts, :cwd, "/")),
      username: name!(Keyword.get(opts, :username, "sandbox"), :username),
      hostname: name!(Keyword.get(opts, :hostname, "bashkit-sandbox"), :hostname),
      files: files!(Keyword.get(opts, :files, [])),
      limits: limits,
      mounts: mounts,
      allowed_mount_paths: allowed_mount_paths!(Keyword.get(opts, :allowed_mount_paths)),
      allow_net: allow_net,
      allow_all_net: allow_all_net,
      block_private_ips:
        boolean!(Keyword.get(opts, :block_private_ips, true), :block_private_ips),
      builtins: Map.keys(builtins),
      virtual_fs: Map.keys(virtual_fs),
      python: python!(Keyword.get(opts, :python, false)),
      commands: commands!(Keyword.get(opts, :commands)),
      soft_delete: soft_delete!(Keyword.get(opts, :soft_delete, false))
    }

    python_conflict!(native.python, builtins)

    %{
      native: native,
      isolation: isolation!(Keyword.get(opts, :isolation, default_isolation())),
      builtins: builtins,
      virtual_fs: virtual_fs,
      callback_timeout_ms: timeout,
      max_reply_bytes: max_reply_bytes
    }
  end

  # The options bounded by the node-wide ceilings (`ExBashkit.Session.Ceilings`):
  # the back-call timeout, the reply cap and the session's wall-clock limit.
  defp bounded_options!(opts) do
    ceilings = Ceilings.read!()

    timeout =
      Ceilings.builtin_timeout_ms!(Keyword.get(opts, :builtin_timeout_ms, :default), ceilings)

    max_reply = Ceilings.max_reply_bytes!(Keyword.get(opts, :max_reply_bytes, :default), ceilings)

    limits =
      opts
      |> Keyword.get(:limits, [])
      |> limits!()
      |> Map.update!(:timeout_ms, &Ceilings.session_timeout_ms!(&1, ceilings))

    {timeout, max_reply, limits}
  end

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
    match?(%{files: [], mounts: [], allowed_mount_paths: nil, cwd: "/"}, native) and
      native.python == [] and native.virtual_fs == [] and native.builtins == []
  end

  # -- generic shapes ---------------------------------------------------------

  defp to_keyword!(opts, what) when is_list(opts) do
    if Enum.all?(opts, &match?({key, _} when is_atom(key), &1)) do
      opts
    else
      raise ArgumentError, "#{what} must be a keyword list, got: #{inspect(opts)}"
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
    value = string!(value, inspect(option))
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

    normalize_vfs(cwd)
  end

  # "/a/./b//c/" -> "/a/b/c", lexically (`..` is refused by the caller).
  defp normalize_vfs(path) do
    path
    |> String.split("/", trim: true)
    |> Enum.reject(&(&1 == "."))
    |> then(&("/" <> Enum.join(&1, "/")))
  end

  defp files!(files) do
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

        # bashkit 0.20 caps function depth at 16 whatever it is told: a
        # higher value would be silently lowered.
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
        {^key, value} -> {key, min(value, @u64_max)}
        nil -> {key, nil}
      end
    end)
  end

  # Shape and mode only: whether the host path exists, is a directory and may
  # be mounted is decided natively (`native/ex_bashkit/src/mounts.rs`), and a
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
    segments = path |> String.split("/") |> tl()
    normal? = path == "/" or Enum.all?(segments, &(&1 not in ["", ".", ".."]))

    unless normal? do
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

  defp url_pattern!(pattern) do
    pattern = string!(pattern, ":allow_net pattern")

    case URI.new(pattern) do
      {:ok, %URI{scheme: scheme, host: host, userinfo: nil, query: nil, fragment: nil}}
      when scheme in ["http", "https"] and is_binary(host) and host != "" ->
        pattern

      _ ->
        raise ArgumentError,
              ":allow_net pattern #{inspect(pattern)} is not a URL prefix like \"https://api.example.com/v1\" " <>
                "(scheme http or https, a host, no credentials, query or fragment)"
    end
  end

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
  # session has (`native/ex_bashkit/src/policy.rs`). Shape here; a name that
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
  # there (`native/ex_bashkit/src/soft_delete.rs`).
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
end
