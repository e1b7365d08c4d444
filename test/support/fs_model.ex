defmodule ExBashkit.Test.FsModel do
  @moduledoc false
  # A model of a directory tree (paths and contents) to check a session's
  # filesystem against, for the model-based property test.
  #
  # All activity happens under `/m` (the session's own `/tmp`, `/bin`, ...
  # are left alone). An operation is done either through the filesystem API
  # (`:api`) or by an equivalent script (`:sh`); both must agree with the
  # model, which follows POSIX semantics:
  #
  #   {:write, via, path, content}   write_file/3 (creates parents) | cat > path
  #   {:append, :sh, path, content}  cat >> path
  #   {:mkdir, via, path, parents?}  mkdir/3 | mkdir [-p]
  #   {:remove, via, path, rec?}     remove/3 | rm [-r]  (`rm` refuses directories)
  #   {:rename, :api, from, to}      rename/3 (rename(2))
  #   {:mv, :sh, from, to}           mv (into `to` when it is a directory)
  #   {:read, via, path}             read_file/2 | cat
  #   {:stat, via, path}             stat/2 | test -d / -f and wc -c
  #   {:list, via, path}             list_dir/2 | ls -1
  #
  # `expect/2` predicts an operation's outcome and the next model; `run/2`
  # performs it on a session; both produce the same normalised shapes.

  alias :proper_types, as: T
  alias ExBashkit.Session

  @root "/m"

  @type model :: %{String.t() => :dir | {:file, binary()}}

  def root, do: @root

  @doc "The model of a session whose `/m` is an empty directory."
  def new, do: %{@root => :dir}

  # -- generators --------------------------------------------------------------

  def path do
    names = T.elements(["a", "b"])

    T.bind(
      T.non_empty(T.resize(3, T.list(names))),
      &T.exactly(Enum.join([@root | &1], "/")),
      false
    )
  end

  @doc """
  `{path, spelling}`: a model path and an equivalent spelling of it with `.`
  segments, doubled slashes and `..` that climbs above `/` (where it stays).
  """
  def spelled_path do
    noise = T.list(T.elements([".", "", "..", "../.."]))

    T.bind(
      T.tuple([path(), T.resize(4, noise), T.resize(4, noise)]),
      fn {p, lead, mid} ->
        # Leading `..`s at the root stay at the root; `.`/"" anywhere are no-ops.
        [first | rest] = String.split(String.trim_leading(p, "/"), "/")
        mid = Enum.reject(mid, &String.starts_with?(&1, ".."))
        segments = lead ++ [first] ++ mid ++ rest
        T.exactly({p, "/" <> Enum.join(segments, "/")})
      end,
      false
    )
  end

  defp any_path, do: T.frequency([{8, path()}, {1, T.exactly(@root)}])
  defp content, do: T.resize(12, T.binary())
  defp via, do: T.elements([:api, :sh])

  def op do
    T.frequency([
      {5, T.tuple([T.exactly(:write), via(), path(), content()])},
      {1, T.tuple([T.exactly(:append), T.exactly(:sh), path(), content()])},
      {3, T.tuple([T.exactly(:mkdir), via(), path(), T.boolean()])},
      {2, T.tuple([T.exactly(:remove), via(), path(), T.boolean()])},
      {2, T.tuple([T.exactly(:rename), T.exactly(:api), path(), path()])},
      {2, T.tuple([T.exactly(:mv), T.exactly(:sh), path(), path()])},
      {2, T.tuple([T.exactly(:read), via(), path()])},
      {2, T.tuple([T.exactly(:stat), via(), any_path()])},
      {2, T.tuple([T.exactly(:list), via(), any_path()])}
    ])
  end

  def ops, do: T.list(op())

  # -- the model ---------------------------------------------------------------

  defp kind(model, path) do
    case Map.get(model, path) do
      :dir -> :dir
      {:file, _} -> :file
      nil -> nil
    end
  end

  defp parent(path), do: Path.dirname(path)

  # Proper ancestors up to and including the root, nearest first.
  defp ancestors(@root), do: []
  defp ancestors(path), do: [parent(path) | ancestors(parent(path))]

  defp descendant?(path, of), do: String.starts_with?(path, of <> "/")

  defp children(model, dir) do
    for {p, v} <- model, parent(p) == dir, p != dir do
      {Path.basename(p), if(v == :dir, do: :dir, else: :file)}
    end
    |> Enum.sort()
  end

  defp subtree(model, path),
    do: Map.filter(model, fn {p, _} -> p == path or descendant?(p, path) end)

  defp drop_subtree(model, path),
    do: Map.reject(model, fn {p, _} -> p == path or descendant?(p, path) end)

  defp move(model, from, to) do
    moved =
      for {p, v} <- subtree(model, from), into: %{} do
        {to <> String.replace_prefix(p, from, ""), v}
      end

    model |> drop_subtree(from) |> drop_subtree(to) |> Map.merge(moved)
  end

  @doc "`{expected_outcome, next_model}` for `op` applied to `model`."
  def expect(model, op)

  def expect(m, {:write, :api, p, data}) do
    cond do
      Enum.any?(ancestors(p), &(kind(m, &1) == :file)) -> {:error, m}
      kind(m, p) == :dir -> {:error, m}
      true -> {:ok, m |> mkdir_p(parent(p)) |> Map.put(p, {:file, data})}
    end
  end

  def expect(m, {:write, :sh, p, data}) do
    if kind(m, parent(p)) == :dir and kind(m, p) != :dir,
      do: {:ok, Map.put(m, p, {:file, data})},
      else: {:error, m}
  end

  def expect(m, {:append, :sh, p, data}) do
    case {kind(m, parent(p)), Map.get(m, p)} do
      {:dir, {:file, old}} -> {:ok, Map.put(m, p, {:file, old <> data})}
      {:dir, nil} -> {:ok, Map.put(m, p, {:file, data})}
      _ -> {:error, m}
    end
  end

  def expect(m, {:mkdir, _via, p, false}) do
    if kind(m, parent(p)) == :dir and kind(m, p) == nil,
      do: {:ok, Map.put(m, p, :dir)},
      else: {:error, m}
  end

  def expect(m, {:mkdir, _via, p, true}) do
    if Enum.any?([p | ancestors(p)], &(kind(m, &1) == :file)),
      do: {:error, m},
      else: {:ok, mkdir_p(m, p)}
  end

  def expect(m, {:remove, via, p, recursive}) do
    case {kind(m, p), via, recursive} do
      {nil, _, _} ->
        {:error, m}

      {:file, _, _} ->
        {:ok, Map.delete(m, p)}

      {:dir, _, true} ->
        {:ok, drop_subtree(m, p)}

      {:dir, :sh, false} ->
        {:error, m}

      {:dir, :api, false} ->
        if children(m, p) == [], do: {:ok, Map.delete(m, p)}, else: {:error, m}
    end
  end

  def expect(m, {:rename, :api, from, to}), do: rename(m, from, to)

  def expect(m, {:mv, :sh, from, to}) do
    target = if kind(m, to) == :dir, do: to <> "/" <> Path.basename(from), else: to

    # (GNU mv refuses `mv f f`; bashkit's mv treats it as rename(2) does, a
    # no-op success. Harmless, and the model follows bashkit.)
    rename(m, from, target)
  end

  def expect(m, {:read, _via, p}) do
    case Map.get(m, p) do
      {:file, data} -> {{:ok, data}, m}
      _ -> {:error, m}
    end
  end

  def expect(m, {:stat, _via, p}) do
    case Map.get(m, p) do
      {:file, data} -> {{:ok, :file, byte_size(data)}, m}
      :dir -> {{:ok, :dir}, m}
      nil -> {:error, m}
    end
  end

  def expect(m, {:list, :api, p}) do
    if kind(m, p) == :dir, do: {{:ok, children(m, p)}, m}, else: {:error, m}
  end

  def expect(m, {:list, :sh, p}) do
    case kind(m, p) do
      :dir -> {{:ok, Enum.map(children(m, p), &elem(&1, 0))}, m}
      :file -> {{:ok, [p]}, m}
      nil -> {:error, m}
    end
  end

  defp mkdir_p(m, p) do
    Enum.reduce(Enum.reverse([p | ancestors(p)]), m, &Map.put_new(&2, &1, :dir))
  end

  # rename(2).
  defp rename(m, from, to) do
    cond do
      kind(m, from) == nil -> {:error, m}
      from == to -> {:ok, m}
      descendant?(to, from) -> {:error, m}
      kind(m, parent(to)) != :dir -> {:error, m}
      true -> rename_onto(m, from, to, kind(m, from), kind(m, to))
    end
  end

  defp rename_onto(m, from, to, _, nil), do: {:ok, move(m, from, to)}
  defp rename_onto(m, from, to, :file, :file), do: {:ok, move(m, from, to)}
  defp rename_onto(m, _from, _to, :file, :dir), do: {:error, m}
  defp rename_onto(m, _from, _to, :dir, :file), do: {:error, m}

  defp rename_onto(m, from, to, :dir, :dir) do
    if children(m, to) == [], do: {:ok, move(m, from, to)}, else: {:error, m}
  end

  # -- the real thing ----------------------------------------------------------

  @doc "Perform `op` on `session`, normalised like `expect/2`'s outcome."
  def run(s, {:write, :api, p, data}), do: unit(Session.write_file(s, p, data))
  def run(s, {:write, :sh, p, data}), do: sh_unit(s, "cat > #{p}", data)
  def run(s, {:append, :sh, p, data}), do: sh_unit(s, "cat >> #{p}", data)
  def run(s, {:mkdir, :api, p, parents}), do: unit(Session.mkdir(s, p, parents: parents))
  def run(s, {:mkdir, :sh, p, parents}), do: sh_unit(s, "mkdir #{if parents, do: "-p "}#{p}")
  def run(s, {:remove, :api, p, rec}), do: unit(Session.remove(s, p, recursive: rec))
  def run(s, {:remove, :sh, p, rec}), do: sh_unit(s, "rm #{if rec, do: "-r "}#{p}")
  def run(s, {:rename, :api, from, to}), do: unit(Session.rename(s, from, to))
  def run(s, {:mv, :sh, from, to}), do: sh_unit(s, "mv #{from} #{to}")

  def run(s, {:read, :api, p}) do
    case Session.read_file(s, p) do
      {:ok, data} -> {:ok, data}
      {:error, message} when is_binary(message) -> :error
    end
  end

  def run(s, {:read, :sh, p}) do
    case sh(s, "cat #{p}") do
      {0, out} -> {:ok, out}
      {_, _} -> :error
    end
  end

  def run(s, {:stat, :api, p}) do
    case Session.stat(s, p) do
      {:ok, %{type: :file, size: size}} -> {:ok, :file, size}
      {:ok, %{type: :dir}} -> {:ok, :dir}
      {:ok, other} -> {:unexpected, other}
      {:error, message} when is_binary(message) -> :error
    end
  end

  def run(s, {:stat, :sh, p}) do
    case sh(
           s,
           "if [ -d #{p} ]; then echo dir; elif [ -f #{p} ]; then wc -c < #{p}; else echo none; fi"
         ) do
      {0, "dir\n"} -> {:ok, :dir}
      {0, "none\n"} -> :error
      {0, size} -> {:ok, :file, size |> String.trim() |> String.to_integer()}
    end
  end

  def run(s, {:list, :api, p}) do
    case Session.list_dir(s, p) do
      {:ok, entries} -> {:ok, entries}
      {:error, message} when is_binary(message) -> :error
    end
  end

  def run(s, {:list, :sh, p}) do
    case sh(s, "ls -1 #{p}") do
      {0, out} -> {:ok, String.split(out, "\n", trim: true)}
      {_, _} -> :error
    end
  end

  @doc "The whole tree under the root as the session's API sees it, in model form."
  def observe(s) do
    walk(s, @root, %{@root => :dir})
  end

  defp walk(s, dir, acc) do
    {:ok, entries} = Session.list_dir(s, dir)

    Enum.reduce(entries, acc, fn
      {name, :dir}, acc ->
        walk(s, dir <> "/" <> name, Map.put(acc, dir <> "/" <> name, :dir))

      {name, type}, acc ->
        path = dir <> "/" <> name
        {:ok, data} = Session.read_file(s, path)
        Map.put(acc, path, if(type == :file, do: {:file, data}, else: {type, data}))
    end)
  end

  @doc "`find /m` as the script sees it: sorted paths."
  def observe_sh(s) do
    {0, out} = sh(s, "find #{@root}")
    out |> String.split("\n", trim: true) |> Enum.sort()
  end

  defp unit(:ok), do: :ok
  defp unit({:error, message}) when is_binary(message), do: :error

  defp sh_unit(s, script, stdin \\ "") do
    case sh(s, script, stdin) do
      {0, _} -> :ok
      {_, _} -> :error
    end
  end

  defp sh(s, script, stdin \\ "") do
    case Session.run(s, script, stdin: stdin) do
      {:ok, %{exit_code: code, stdout: out}} -> {code, out}
      {:error, %{message: message}} -> {:exec_error, message}
    end
  end
end
