defmodule ExBashkit.Test.TarWriter do
  @moduledoc false
  # A minimal ustar writer for tests: any member name, type and link target,
  # including the hostile ones a real `tar` refuses to write (absolute names,
  # `..`, devices, sizes that lie).

  import Bitwise

  @doc """
  An archive of `members`: `{:file, name, content}`, `{:file, name, content,
  mode}`, `{:dir, name}`, `{:symlink, name, target}`, `{:hardlink, name,
  target}`, `{:chardev, name}`, `{:header_only, name, claimed_size}`,
  `{:long_name, name, content}` (a GNU long-name record, then the file).
  """
  def tar(members) do
    IO.iodata_to_binary([Enum.map(members, &member/1), <<0::size(1024)-unit(8)>>])
  end

  defp member({:file, name, content}), do: member({:file, name, content, 0o644})

  defp member({:file, name, content, mode}),
    do: [header(name, ?0, byte_size(content), mode, ""), pad(content)]

  defp member({:dir, name}), do: header(name, ?5, 0, 0o755, "")
  defp member({:symlink, name, target}), do: header(name, ?2, 0, 0o777, target)
  defp member({:hardlink, name, target}), do: header(name, ?1, 0, 0o644, target)
  defp member({:chardev, name}), do: header(name, ?3, 0, 0o644, "")
  defp member({:header_only, name, size}), do: header(name, ?0, size, 0o644, "")

  defp member({:long_name, name, content}) do
    record = name <> <<0>>

    [
      header("././@LongLink", ?L, byte_size(record), 0o644, ""),
      pad(record),
      member({:file, binary_part(name, 0, min(byte_size(name), 99)), content})
    ]
  end

  defp pad(content) do
    rest = rem(512 - rem(byte_size(content), 512), 512)
    [content, :binary.copy(<<0>>, rest)]
  end

  defp header(name, type, size, mode, link) do
    fields = [
      field(name, 100),
      octal(mode, 8),
      octal(0, 8),
      octal(0, 8),
      octal(size, 12),
      octal(1_700_000_000, 12),
      "        ",
      <<type>>,
      field(link, 100),
      "ustar\0",
      "00",
      field("", 32),
      field("", 32),
      octal(0, 8),
      octal(0, 8),
      field("", 155),
      field("", 12)
    ]

    block = IO.iodata_to_binary(fields)
    sum = block |> :binary.bin_to_list() |> Enum.sum()
    <<before::binary-size(148), _::binary-size(8), rest::binary>> = block
    checksum = String.pad_leading(Integer.to_string(sum &&& 0o777777, 8), 6, "0") <> <<0, ?\s>>
    before <> checksum <> rest
  end

  defp field(value, size), do: value <> :binary.copy(<<0>>, size - byte_size(value))

  defp octal(value, size) do
    String.pad_leading(Integer.to_string(value, 8), size - 1, "0") <> <<0>>
  end
end
