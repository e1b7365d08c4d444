defmodule ExBashkit.Session.Trash do
  @moduledoc false
  # `ExBashkit.Session.trash/1` and `undelete/2` for sessions built with
  # `soft_delete:`: requests of the filesystem API (`{:trash}`,
  # `{:undelete, path}`, see `native/ex_bashkit/src/session/trash.rs`),
  # through `ExBashkit.Backend.fs/3` like `read_file/2`, so both isolation
  # modes answer them the same way.

  alias ExBashkit.{Backend, Error, Session}

  @doc false
  def trash(session), do: fs(session, {:trash})

  @doc false
  def undelete(session, path) do
    case path!(path) do
      {:ok, path} -> fs(session, {:undelete, path})
      error -> error
    end
  end

  defp fs(%Session{resource: resource, location: location}, request),
    do: Error.structured(Backend.fs(resource, location, request))

  defp fs(other, request), do: Session.not_a_session!(other, "#{elem(request, 0)}")

  # Paths as the filesystem API takes them: rooted at `/`, normalized the
  # way the trash recorded them ("/a//b/" was trashed as "/a/b").
  defp path!(path) when is_list(path), do: path!(List.to_string(path))

  defp path!(path) when is_binary(path) do
    cond do
      not String.valid?(path) or String.contains?(path, <<0>>) ->
        {:error, Error.new(:internal, "#{inspect(path)}: not a valid path")}

      true ->
        segments = String.split(path, "/", trim: true) |> Enum.reject(&(&1 == "."))

        if ".." in segments,
          do:
            {:error, Error.new(:internal, "#{inspect(path)}: .. segments are not resolved here")},
          else: {:ok, "/" <> Enum.join(segments, "/")}
    end
  end

  defp path!(path), do: raise(ArgumentError, "path must be a string, got: #{inspect(path)}")
end
