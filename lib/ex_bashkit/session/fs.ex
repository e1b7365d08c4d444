defmodule ExBashkit.Session.Fs do
  @moduledoc false
  # The filesystem API behind `ExBashkit.Session.read_file/2` and its
  # siblings: argument checks here, the request itself through
  # `ExBashkit.Backend.fs/3` (answered without waiting for the interpreter).

  alias ExBashkit.{Backend, Error, Session}

  @doc false
  def read_file(session, path) do
    with {:ok, path} <- fs_path(path), do: fs(session, {:read, path})
  end

  @doc false
  def write_file(session, path, content) do
    content =
      case iodata_to_binary(content) do
        {:ok, bin} ->
          bin

        :error ->
          raise ArgumentError, "write_file/3 content must be iodata, got: #{inspect(content)}"
      end

    with {:ok, path} <- fs_path(path), do: fs(session, {:write, path, content})
  end

  @doc false
  def list_dir(session, path) do
    with {:ok, path} <- fs_path(path), do: fs(session, {:list, path})
  end

  @doc false
  def mkdir(session, path, opts) do
    parents = bool_opt!(opts, :parents, "mkdir/3")
    with {:ok, path} <- fs_path(path), do: fs(session, {:mkdir, path, parents})
  end

  @doc false
  def remove(session, path, opts) do
    recursive = bool_opt!(opts, :recursive, "remove/3")
    with {:ok, path} <- fs_path(path), do: fs(session, {:remove, path, recursive})
  end

  @doc false
  def rename(session, from, to) do
    with {:ok, from} <- fs_path(from),
         {:ok, to} <- fs_path(to),
         do: fs(session, {:rename, from, to})
  end

  @doc false
  def stat(session, path) do
    with {:ok, path} <- fs_path(path),
         {:ok, {type, size}} <- fs(session, {:stat, path}),
         do: {:ok, %{type: type, size: size}}
  end

  defp bool_opt!(opts, key, fun) when is_list(opts) do
    Enum.each(opts, fn
      {^key, value} when is_boolean(value) ->
        :ok

      {^key, value} ->
        raise ArgumentError,
              "#{fun} option #{inspect(key)} must be a boolean, got: #{inspect(value)}"

      other ->
        raise ArgumentError, "unknown #{fun} option: #{inspect(other)}"
    end)

    Keyword.get(opts, key, false)
  end

  defp bool_opt!(opts, _key, fun),
    do: raise(ArgumentError, "#{fun} options must be a keyword list, got: #{inspect(opts)}")

  # The answer with its error as `%ExBashkit.Error{}` (the public calls
  # give its message, the bang variants raise it).
  defp fs(%Session{resource: resource, location: location}, request),
    do: Error.structured(Backend.fs(resource, location, request))

  defp fs(other, request),
    do: Session.not_a_session!(other, "#{elem(request, 0)} (the filesystem API)")

  # Filesystem API paths: strings (or charlists), rooted at `/`.
  defp fs_path(path) when is_list(path) do
    fs_path(List.to_string(path))
  rescue
    _ in [ArgumentError, UnicodeConversionError] ->
      raise ArgumentError, "path must be a string, got: #{inspect(path)}"
  end

  defp fs_path(path) when is_binary(path) do
    cond do
      not String.valid?(path) -> refused("#{inspect(path)}: path is not valid UTF-8")
      String.contains?(path, <<0>>) -> refused("#{inspect(path)}: path contains a NUL byte")
      path == "" -> refused("empty path")
      String.starts_with?(path, "/") -> {:ok, path}
      true -> {:ok, "/" <> path}
    end
  end

  defp fs_path(path), do: raise(ArgumentError, "path must be a string, got: #{inspect(path)}")

  defp refused(message), do: {:error, Error.new(:internal, message)}

  @doc false
  # iodata as one binary, or `:error` for a term that is not iodata (the
  # callers raise their own ArgumentError naming the argument).
  @spec iodata_to_binary(term()) :: {:ok, binary()} | :error
  def iodata_to_binary(data) do
    {:ok, IO.iodata_to_binary(data)}
  rescue
    ArgumentError -> :error
  end
end
