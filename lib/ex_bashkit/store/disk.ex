defmodule ExBashkit.Store.Disk do
  @moduledoc """
  An `ExBashkit.Store` in a directory: one file per object, named by its
  id, so that histories survive a restart of the VM.

  A file is written whole to a temporary name and renamed into place: a
  crash mid-write leaves no half object under an id (the temporary files
  are removed when the store starts). Its content is the object's
  references (a count, then 32 bytes each) followed by its blob, so the
  collector reads the head of a file, not its content.

  Option: `:dir` (required), created if missing.
  """

  @behaviour ExBashkit.Store
  use GenServer

  @tmp_prefix ".tmp-"

  @impl ExBashkit.Store
  def child_spec(opts),
    do: %{id: {__MODULE__, dir!(opts)}, start: {__MODULE__, :start_link, [opts]}}

  @doc "Start the store's process: it makes the directory and clears stale temporary files."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, dir!(opts))

  @impl GenServer
  def init(dir) do
    File.mkdir_p!(dir)

    for name <- File.ls!(dir),
        String.starts_with?(name, @tmp_prefix),
        do: File.rm(Path.join(dir, name))

    {:ok, dir}
  end

  defp dir!(opts) do
    case Keyword.fetch(opts, :dir) do
      {:ok, dir} when is_binary(dir) -> dir
      _ -> raise ArgumentError, "ExBashkit.Store.Disk needs the option :dir (a path)"
    end
  end

  # An id names a file: only 64 lowercase hex characters ever do.
  defp path!(opts, id) do
    unless is_binary(id) and byte_size(id) == 64 and id =~ ~r/\A[0-9a-f]{64}\z/,
      do: raise(ArgumentError, "not an object id: #{inspect(id)}")

    Path.join(dir!(opts), id)
  end

  @impl ExBashkit.Store
  def put(opts, objects) do
    Enum.reduce_while(objects, :ok, fn {id, blob, refs}, :ok ->
      path = path!(opts, id)

      case File.exists?(path) or write(opts, path, [header(refs), blob]) do
        true ->
          {:cont, :ok}

        :ok ->
          {:cont, :ok}

        {:error, reason} ->
          {:halt, {:error, "cannot store object #{id}: #{:file.format_error(reason)}"}}
      end
    end)
  end

  defp header(refs) do
    [<<length(refs)::32>> | Enum.map(refs, &Base.decode16!(&1, case: :lower))]
  end

  defp write(opts, path, content) do
    tmp =
      Path.join(dir!(opts), @tmp_prefix <> Integer.to_string(System.unique_integer([:positive])))

    with :ok <- File.write(tmp, content, [:raw]),
         :ok <- File.rename(tmp, path) do
      :ok
    else
      error ->
        File.rm(tmp)
        error
    end
  end

  @impl ExBashkit.Store
  def get(opts, ids) do
    for id <- ids,
        {:ok, data} <- [File.read(path!(opts, id))],
        {_refs, blob} <- split(data),
        into: %{},
        do: {id, blob}
  end

  @impl ExBashkit.Store
  def refs(opts, ids) do
    for id <- ids, {:ok, refs} <- [read_refs(path!(opts, id))], into: %{}, do: {id, refs}
  end

  defp read_refs(path) do
    with {:ok, file} <- :file.open(path, [:read, :raw, :binary]) do
      try do
        with {:ok, <<count::32>>} <- :file.read(file, 4),
             {:ok, raw} <- read_exactly(file, count * 32) do
          {:ok, for(<<id::binary-32 <- raw>>, do: Base.encode16(id, case: :lower))}
        else
          _ -> :error
        end
      after
        :file.close(file)
      end
    end
  end

  defp read_exactly(_file, 0), do: {:ok, <<>>}

  defp read_exactly(file, n) do
    case :file.read(file, n) do
      {:ok, data} when byte_size(data) == n -> {:ok, data}
      _ -> :error
    end
  end

  defp split(<<count::32, rest::binary>>) when byte_size(rest) >= count * 32 do
    <<raw::binary-size(count * 32), blob::binary>> = rest
    [{for(<<id::binary-32 <- raw>>, do: Base.encode16(id, case: :lower)), blob}]
  end

  defp split(_), do: []

  @impl ExBashkit.Store
  def has?(opts, id), do: File.exists?(path!(opts, id))

  @impl ExBashkit.Store
  def delete(opts, ids), do: Enum.each(ids, &File.rm(path!(opts, &1)))

  @impl ExBashkit.Store
  def ids(opts) do
    case File.ls(dir!(opts)) do
      {:ok, names} -> Enum.filter(names, &(&1 =~ ~r/\A[0-9a-f]{64}\z/))
      {:error, _} -> []
    end
  end

  @impl ExBashkit.Store
  def size(opts) do
    ids = ids(opts)

    bytes =
      Enum.reduce(ids, 0, fn id, sum ->
        case File.stat(path!(opts, id)) do
          {:ok, %{size: size}} -> sum + size
          _ -> sum
        end
      end)

    %{objects: length(ids), bytes: bytes}
  end
end
