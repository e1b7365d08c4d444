defmodule ExBashkit.Precompiled.NamingTest do
  # The build-time pieces of the precompiled path that need no network:
  # target triples, NIF versions and artifact names as rustler_precompiled
  # computes them, the checksum file format, the crate's executables, and
  # the content-hash install. (The modules live in build_support/, loaded by
  # mix.exs.)
  use ExUnit.Case, async: true

  alias ExBashkit.Build.{Artifact, Checksums, Install, SourceBuild, Target}

  @moduletag :precompiled

  test "system architecture strings map to Rust target triples" do
    for {erlang, rust} <- [
          {"x86_64-pc-linux-gnu", "x86_64-unknown-linux-gnu"},
          {"aarch64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"},
          {"x86_64-alpine-linux-musl", "x86_64-unknown-linux-musl"},
          {"aarch64-alpine-linux-musl", "aarch64-unknown-linux-musl"},
          {"x86_64-redhat-linux", "x86_64-unknown-linux-gnu"},
          {"aarch64-apple-darwin23.1.0", "aarch64-apple-darwin"},
          {"arm-apple-darwin22.4.0", "aarch64-apple-darwin"},
          {"x86_64-apple-darwin21.6.0", "x86_64-apple-darwin"}
        ] do
      assert Target.from_system_architecture(erlang) == rust
    end

    if match?({:unix, _}, :os.type()) do
      this_vm = List.to_string(:erlang.system_info(:system_architecture))
      assert Target.host() == Target.from_system_architecture(this_vm)
    end
  end

  test "the NIF version is the newest built one the VM can load" do
    assert Target.nif_version("2.16") == {:ok, "2.16"}
    assert Target.nif_version("2.17") == {:ok, "2.16"}
    assert {:error, message} = Target.nif_version("2.15")
    assert message =~ "2.15"
    assert {:error, _} = Target.nif_version("3.0")
  end

  test "artifact names are rustler_precompiled's" do
    assert Artifact.name("0.1.0", "2.16", "x86_64-unknown-linux-gnu") ==
             "libex_bashkit-v0.1.0-nif-2.16-x86_64-unknown-linux-gnu.so.tar.gz"

    assert Artifact.name("0.1.0", "2.16", "aarch64-apple-darwin") ==
             "libex_bashkit-v0.1.0-nif-2.16-aarch64-apple-darwin.so.tar.gz"

    # rustler_precompiled drops the `lib` prefix on Windows.
    assert Artifact.name("0.1.0", "2.16", "x86_64-pc-windows-msvc") ==
             "ex_bashkit-v0.1.0-nif-2.16-x86_64-pc-windows-msvc.dll.tar.gz"

    assert Artifact.installed_lib("x86_64-pc-windows-msvc") == "ex_bashkit.dll"
    assert Artifact.installed_lib("x86_64-unknown-linux-musl") == "ex_bashkit.so"
  end

  @tag :tmp_dir
  test "an artifact round-trips: library renamed, executables kept, unsafe entries refused",
       %{tmp_dir: dir} do
    lib = Path.join(dir, "built.so")
    worker = Path.join(dir, "built_worker")
    File.write!(lib, "LIB")
    File.write!(worker, "WORKER")
    out = Path.join(dir, "out/a.tar.gz")
    target = "x86_64-unknown-linux-gnu"

    :ok =
      Artifact.pack!(
        [{"ex_bashkit.so", lib}, {"ex_bashkit_worker", worker}],
        out,
        "1.2.3",
        "2.16",
        target
      )

    tarball = File.read!(out)
    {:ok, listed} = :erl_tar.table({:binary, tarball}, [:compressed, :verbose])

    assert Enum.sort(
             for {name, :regular, _, _, mode, _, _} <- listed,
                 do: {to_string(name), Bitwise.band(mode, 0o777)}
           ) ==
             [{"ex_bashkit_worker", 0o755}, {"libex_bashkit-v1.2.3-nif-2.16-#{target}.so", 0o755}]

    assert Artifact.unpack(tarball, "1.2.3", "2.16", target) ==
             {:ok, [{"ex_bashkit.so", "LIB"}, {"ex_bashkit_worker", "WORKER"}]}

    assert {:error, "no libex_bashkit-v9.9.9" <> _} =
             Artifact.unpack(tarball, "9.9.9", "2.16", target)

    assert {:error, "not a gzipped tar" <> _} = Artifact.unpack("junk", "1.2.3", "2.16", target)

    evil = Path.join(dir, "evil.tar.gz")
    :ok = :erl_tar.create(String.to_charlist(evil), [{~c"../escape", "x"}], [:compressed])

    assert {:error, "entries with unsafe names" <> _} =
             Artifact.unpack(File.read!(evil), "1.2.3", "2.16", target)
  end

  @tag :tmp_dir
  test "the checksum file is written in rustler_precompiled's format and read as a literal",
       %{tmp_dir: dir} do
    path = Path.join(dir, "checksum-Elixir.ExBashkit.Native.exs")
    assert Checksums.read(path) == {:ok, %{}}

    Checksums.put!(path, "b.tar.gz", Checksums.of("b"))
    Checksums.put!(path, "a.tar.gz", Checksums.of("a"))
    Checksums.put!(path, "b.tar.gz", Checksums.of("b2"))

    {evaluated, _} = Code.eval_file(path)
    assert {:ok, ^evaluated} = Checksums.read(path)
    assert evaluated == %{"a.tar.gz" => Checksums.of("a"), "b.tar.gz" => Checksums.of("b2")}
    assert File.read!(path) =~ ~s(%{\n  "a.tar.gz" => "sha256:)

    # Code is refused, not run.
    File.write!(path, ~s[%{"a" => System.halt()}])
    assert {:error, _} = Checksums.read(path)

    assert {:error, "malformed checksum" <> _} = Checksums.parse("sha256:xyz", "a")
    assert {:error, "unsupported checksum" <> _} = Checksums.parse("md5:00", "a")

    assert Checksums.parse("sha256:" <> String.duplicate("AB", 32), "a") ==
             {:ok, String.duplicate("ab", 32)}
  end

  @tag :tmp_dir
  test "the crate's executables are found the way cargo finds them", %{tmp_dir: crate} do
    File.mkdir_p!(Path.join(crate, "src/bin/tool"))
    File.write!(Path.join(crate, "src/bin/worker.rs"), "")
    File.write!(Path.join(crate, "src/bin/extra.rs"), "")
    File.write!(Path.join(crate, "src/bin/tool/main.rs"), "")

    File.write!(Path.join(crate, "Cargo.toml"), """
    [package]
    name = "ex_bashkit"

    [lib]
    name = "ex_bashkit"

    [[bin]] # the session worker
    name = "ex_bashkit_worker"
    path = "src/bin/worker.rs"
    """)

    assert Enum.sort(SourceBuild.bin_names(crate)) == ["ex_bashkit_worker", "extra", "tool"]

    File.write!(Path.join(crate, "Cargo.toml"), "[package]\nname = \"x\"\nautobins = false\n")
    assert SourceBuild.bin_names(crate) == []

    # This repository's crate, whatever executables it has today.
    assert is_list(SourceBuild.bin_names())
  end

  @tag :tmp_dir
  test "install replaces a file whose content differs, whatever its size and mtime",
       %{tmp_dir: dir} do
    assert Install.install!(dir, [{"a.so", "new!"}, {"w", "worker"}]) == ["a.so", "w"]
    assert Install.install!(dir, [{"a.so", "new!"}, {"w", "worker"}]) == []

    # Same size, newer mtime, other bytes: reinstalled.
    File.write!(Path.join(dir, "a.so"), "old!")
    File.touch!(Path.join(dir, "a.so"), System.os_time(:second) + 3600)
    assert Install.install!(dir, [{"a.so", "new!"}, {"w", "worker"}]) == ["a.so"]
    assert File.read!(Path.join(dir, "a.so")) == "new!"

    # A file the new install does not carry is removed; .gitkeep stays.
    File.write!(Path.join(dir, ".gitkeep"), "")
    assert Install.install!(dir, [{"a.so", "new!"}]) == []
    assert Enum.sort(File.ls!(dir)) == [".gitkeep", "a.so"]
  end
end
