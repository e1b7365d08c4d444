defmodule ExBashkit.Build.Install do
  @moduledoc """
  Puts the native files into `priv/native/`, whichever way they were
  obtained (built from source or unpacked from an artifact).

  - A file is replaced only when its content differs (SHA-256), never
    judged by size or mtime: a rebuilt library of the same size, or one
    older than the installed copy, is still installed.
  - Replacement is copy-to-temp + rename, never an overwrite in place: a VM
    that has the old library loaded could crash if its mapped pages changed
    underneath it.
  - Files a previous install left that this one does not carry are removed,
    so that `priv/native/` holds exactly one build's parts.
  """

  @keep [".gitkeep"]

  @doc """
  Installs `files` (`[{name, content}]`) into `dir`; returns the names it
  (re)wrote.
  """
  @spec install!(Path.t(), [{String.t(), binary()}]) :: [String.t()]
  def install!(dir, files) do
    File.mkdir_p!(dir)
    names = Enum.map(files, &elem(&1, 0))

    written =
      for {name, content} <- files, changed?(Path.join(dir, name), content) do
        dest = Path.join(dir, name)
        tmp = dest <> ".tmp#{System.unique_integer([:positive])}"
        File.write!(tmp, content)
        File.chmod!(tmp, 0o755)
        File.rename!(tmp, dest)
        name
      end

    for name <- File.ls!(dir),
        name not in names and name not in @keep and not String.contains?(name, ".tmp"),
        File.regular?(Path.join(dir, name)),
        do: File.rm(Path.join(dir, name))

    written
  end

  defp changed?(path, content) do
    case File.read(path) do
      {:ok, installed} -> :crypto.hash(:sha256, installed) != :crypto.hash(:sha256, content)
      {:error, _} -> true
    end
  end
end
