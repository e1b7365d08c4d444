defmodule ExBashkit.Session.Tar do
  @moduledoc false
  # The machinery behind `ExBashkit.Session.export_tar/3`: validate the path
  # and options, submit the job (`native/ex_bashkit/src/session/tar.rs`) and await
  # its answer. Like a snapshot, it runs between scripts in arrival order.

  @doc false
  @spec export(ExBashkit.Session.t(), term(), term()) :: {:ok, binary()} | {:error, String.t()}
  def export(session, path, opts) do
    request = %{path: path!(path), gzip: gzip!(opts)}

    ExBashkit.Request.run(session, :export_tar, [request], "export_tar/3")
  end

  defp path!(path) when is_binary(path) do
    parts = String.split(path, "/", trim: true)

    cond do
      not String.starts_with?(path, "/") ->
        raise ArgumentError, "export_tar/3: path must be absolute, got: #{inspect(path)}"

      ".." in parts or not String.valid?(path) or String.contains?(path, <<0>>) ->
        raise ArgumentError, "export_tar/3: invalid path #{inspect(path)}"

      true ->
        "/" <> Enum.join(Enum.reject(parts, &(&1 == ".")), "/")
    end
  end

  defp path!(path),
    do: raise(ArgumentError, "export_tar/3: path must be a string, got: #{inspect(path)}")

  defp gzip!(opts) do
    unless is_list(opts) and Enum.all?(opts, &match?({key, _} when is_atom(key), &1)) do
      raise ArgumentError, "export_tar/3 options must be a keyword list, got: #{inspect(opts)}"
    end

    Enum.reduce(opts, false, fn
      {:gzip, value}, _ when is_boolean(value) ->
        value

      other, _ ->
        raise ArgumentError, "invalid export_tar/3 option: #{inspect(other)}"
    end)
  end
end
