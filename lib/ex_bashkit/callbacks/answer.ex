defmodule ExBashkit.Callbacks.Answer do
  @moduledoc false
  # What user code returned for a back-call, checked and turned into one of
  # the few shapes the Rust side decodes (`callbacks.rs`, `decode_answer`):
  #
  #   {:command, stdout, stderr, exit_code}           builtin outcome
  #   :done | {:data, binary} | {:entries, [{name, kind}]}
  #     | {:stat, kind, size} | {:failed, reason}     virtual_fs outcome
  #
  # This is the one place the rules on replies live (Rust trusts the shape):
  #
  #   * size: everything that crosses back (builtin stdout + stderr, read
  #     data, a listing at its names plus `@entry_overhead` bytes per entry,
  #     an error message) is measured against the session's
  #     `max_reply_bytes` *before* it is flattened or sent, so an oversized
  #     term is never copied into the interpreter;
  #   * listings: a name that is empty, `.`, `..`, holds `/` or NUL, or is not
  #     valid UTF-8, or an unknown entry type, fails the listing; duplicates
  #     are listed once; a `list` deeper than `@max_depth` below the mount
  #     fails before the backend is asked;
  #   * exit codes are masked to 0..255, as a shell does.

  alias ExBashkit.Result

  @kinds [:file, :dir, :symlink]
  @ops_without_payload [:write, :append, :mkdir, :remove, :rename]
  # A size the core can store; a guard cannot call `Defaults.u64_max/0`.
  @u64_max ExBashkit.Session.Defaults.u64_max()

  # What one listing entry costs beyond its name: the tuple, the kind and
  # the list cell on both sides of the boundary.
  @entry_overhead 64

  # Levels below the mount a directory may be listed at.
  @max_depth 64

  @doc false
  @spec max_depth() :: pos_integer()
  def max_depth, do: @max_depth

  @doc false
  @spec entry_overhead() :: pos_integer()
  def entry_overhead, do: @entry_overhead

  # -- builtins ---------------------------------------------------------------

  @doc false
  @spec builtin(String.t(), term(), pos_integer()) :: tuple()
  def builtin(name, answer, cap) do
    case answer do
      {:ok, out} ->
        command(name, answer, [out, ""], 0, cap)

      {:error, err} ->
        command(name, answer, ["", err], 1, cap)

      %Result{stdout: out, stderr: err, exit_code: code} when is_integer(code) ->
        command(name, answer, [out, err], Integer.mod(code, 256), cap)

      other ->
        invalid_builtin(name, other)
    end
  end

  defp command(name, answer, [out, err], code, cap) do
    with {:ok, out_size} <- size(out),
         {:ok, err_size} <- size(err) do
      total = out_size + err_size

      if total > cap do
        {:command, "", "#{name}: #{over_cap(total, cap)}\n", 1}
      else
        {:command, IO.iodata_to_binary(out), IO.iodata_to_binary(err), code}
      end
    else
      :error -> invalid_builtin(name, answer)
    end
  end

  defp invalid_builtin(name, value) do
    {:command, "",
     "#{name}: builtin returned an invalid value: #{short_inspect(value)} " <>
       "(expected {:ok, iodata}, {:error, iodata} or %ExBashkit.Result{})\n", 1}
  end

  # -- virtual_fs -------------------------------------------------------------

  @doc false
  # Refuse a request before the backend sees it (`nil`: go ahead).
  @spec vfs_precheck(atom(), String.t()) :: {:failed, String.t()} | nil
  def vfs_precheck(:list, path) do
    depth = path |> String.split("/", trim: true) |> length()

    if depth > @max_depth do
      {:failed,
       "virtual_fs directory #{path} is #{depth} levels deep (max #{@max_depth}): " <>
         "the backend reports ever-deeper directories"}
    end
  end

  def vfs_precheck(_op, _path), do: nil

  @doc false
  @spec vfs(atom(), String.t(), term(), pos_integer()) :: term()
  def vfs(op, path, answer, cap) do
    case {op, answer} do
      {_, {:error, reason}} when is_atom(reason) ->
        {:failed, Atom.to_string(reason)}

      {_, {:error, reason}} when is_binary(reason) ->
        if byte_size(reason) > cap,
          do: {:failed, "virtual_fs error message: " <> over_cap(byte_size(reason), cap)},
          else: {:failed, printable(reason)}

      {op, :ok} when op in @ops_without_payload ->
        :done

      {op, {:ok, _}} when op in @ops_without_payload ->
        :done

      {:read, {:ok, data}} ->
        read(path, data, answer, cap)

      {:list, {:ok, entries}} when is_list(entries) ->
        listing(path, entries, cap)

      {:stat, {:ok, %{type: kind} = stat}} when kind in @kinds ->
        case Map.get(stat, :size, 0) do
          size when is_integer(size) and size >= 0 and size <= @u64_max -> {:stat, kind, size}
          _ -> invalid_vfs(op, answer)
        end

      _ ->
        invalid_vfs(op, answer)
    end
  end

  defp read(path, data, answer, cap) do
    case size(data) do
      {:ok, n} when n > cap -> {:failed, "virtual_fs read of #{path}: " <> over_cap(n, cap)}
      {:ok, _} -> {:data, IO.iodata_to_binary(data)}
      :error -> invalid_vfs(:read, answer)
    end
  end

  # Walk the listing once, stopping at the first problem or when the cap is
  # passed (a listing of millions of entries costs only up to the cap).
  defp listing(path, entries, cap), do: listing(path, entries, cap, 0, MapSet.new(), [])

  defp listing(_path, [], _cap, _bytes, _seen, acc), do: {:entries, Enum.reverse(acc)}

  defp listing(path, [entry | rest], cap, bytes, seen, acc) do
    with {:ok, name, kind} <- entry(entry) do
      bytes = bytes + byte_size(name) + @entry_overhead

      cond do
        bytes > cap ->
          {:failed,
           "virtual_fs listing too large: #{path} lists more than #{cap} bytes " <>
             "(names plus #{@entry_overhead} per entry), over :max_reply_bytes (#{cap})"}

        MapSet.member?(seen, name) ->
          listing(path, rest, cap, bytes, seen, acc)

        true ->
          listing(path, rest, cap, bytes, MapSet.put(seen, name), [{name, kind} | acc])
      end
    else
      {:error, problem} ->
        {:failed, "virtual_fs listing of #{path} is malformed: #{problem}"}
    end
  end

  defp listing(path, improper, _cap, _bytes, _seen, _acc),
    do:
      {:failed,
       "virtual_fs listing of #{path} is malformed: improper list tail #{short_inspect(improper)}"}

  defp entry({name, kind}) when kind in @kinds, do: entry_name(name, kind)

  defp entry({name, kind}) when is_binary(name),
    do:
      {:error,
       "entry #{short_inspect(name)} has unknown type #{short_inspect(kind)} (expected :file, :dir or :symlink)"}

  defp entry(name) when is_binary(name), do: entry_name(name, :file)
  defp entry(other), do: {:error, "entry #{short_inspect(other)} is not {name, kind} or a name"}

  defp entry_name(name, kind) when is_binary(name) do
    cond do
      name in ["", ".", ".."] -> {:error, "entry name #{inspect(name)} is not a file name"}
      not String.valid?(name) -> {:error, "entry name #{short_inspect(name)} is not valid UTF-8"}
      String.contains?(name, "/") -> {:error, "entry name #{short_inspect(name)} contains \"/\""}
      String.contains?(name, <<0>>) -> {:error, "entry name #{short_inspect(name)} contains NUL"}
      true -> {:ok, name, kind}
    end
  end

  defp entry_name(name, _kind), do: {:error, "entry name #{short_inspect(name)} is not a string"}

  defp invalid_vfs(op, answer) do
    {:failed,
     "virtual_fs backend returned an invalid value for #{inspect(op)}: #{short_inspect(answer)}"}
  end

  # -- helpers ----------------------------------------------------------------

  defp over_cap(size, cap),
    do: "reply of #{size} bytes exceeds the session's :max_reply_bytes (#{cap}); refused"

  # The byte size of iodata without flattening it.
  defp size(data) when is_binary(data), do: {:ok, byte_size(data)}

  defp size(data) do
    {:ok, IO.iodata_length(data)}
  rescue
    ArgumentError -> :error
  end

  @doc false
  @spec short_inspect(term()) :: String.t()
  def short_inspect(term), do: inspect(term, limit: 8, printable_limit: 200)

  defp printable(string), do: if(String.valid?(string), do: string, else: inspect(string))
end
