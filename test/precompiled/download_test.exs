defmodule ExBashkit.Precompiled.DownloadTest do
  # The precompiled path end to end, with real parts: `mix ex_bashkit.package`
  # builds a real artifact from this checkout, a real HTTP server on 127.0.0.1
  # serves it, and a fresh copy of the project (no cargo target dir) compiles
  # in its own `mix` process with cargo removed from PATH.
  #
  # One artifact is packaged for the whole module (setup_all); the failure
  # cases stop inside the native compiler, before any Elixir compiles, so each
  # takes a VM start. Tagged :precompiled, and in the default suite (CI runs it).
  use ExUnit.Case, async: false

  alias ExBashkit.Test.{FreshProject, HttpServer}

  @moduletag :precompiled
  @moduletag timeout: 600_000

  @checksum_file "checksum-Elixir.ExBashkit.Native.exs"

  setup_all do
    root = File.cwd!()

    scratch =
      Path.join(System.tmp_dir!(), "ex_bashkit_precompiled_#{System.unique_integer([:positive])}")

    File.mkdir_p!(scratch)
    on_exit(fn -> File.rm_rf(scratch) end)

    # Packaged in this checkout from its release build, which is already
    # there (the default, `dist`, would build everything again with LTO);
    # the repository's own checksum file is left alone.
    sums_file = Path.join(scratch, "sums.exs")

    {output, status} =
      FreshProject.mix(
        root,
        [
          "ex_bashkit.package",
          "--out",
          Path.join(scratch, "out"),
          "--checksum-file",
          sums_file,
          "--profile",
          "release"
        ],
        mix_env: "test",
        env: [{"PATH", System.get_env("PATH")}],
        timeout: 1_200_000
      )

    assert status == 0, "mix ex_bashkit.package failed:\n#{output}"

    {sums, _} = Code.eval_file(sums_file)
    assert [{name, "sha256:" <> hex}] = Map.to_list(sums)
    artifact = File.read!(Path.join([scratch, "out", name]))
    assert sha256(artifact) == hex

    {:ok, entries} = :erl_tar.extract({:binary, artifact}, [:compressed, :memory])
    entries = for {entry, content} <- entries, do: {List.to_string(entry), content}

    # Same length, one byte changed in the middle: still a gzip stream.
    middle = div(byte_size(artifact), 2)
    <<head::binary-size(middle), byte, tail::binary>> = artifact
    tampered = <<head::binary, Bitwise.bxor(byte, 0xFF), tail::binary>>

    %{
      root: root,
      scratch: scratch,
      name: name,
      hex: hex,
      artifact: artifact,
      entries: entries,
      tampered: tampered,
      no_cargo: FreshProject.path_without_cargo(scratch)
    }
  end

  setup ctx do
    %{name: name, artifact: artifact, tampered: tampered} = ctx

    server =
      HttpServer.start!(
        handler: fn
          "GET", "/good/" <> ^name -> {200, [], artifact}
          "GET", "/tampered/" <> ^name -> {200, [], tampered}
          _, _ -> {404, [], "not found"}
        end
      )

    dir = FreshProject.copy!(ctx.root)
    on_exit(fn -> File.rm_rf(dir) end)
    %{server: server, dir: dir, cache: Path.join(dir, "cache")}
  end

  test "downloads, verifies, installs and loads the artifact with no cargo on PATH", ctx do
    write_sums(ctx, %{ctx.name => "sha256:" <> ctx.hex})
    refute :os.find_executable(~c"cargo", String.to_charlist(ctx.no_cargo))

    # Both native parts run: the worker executable (isolation: :process)
    # and the NIF library (isolation: :in_node).
    script = ~S"""
    for isolation <- [:process, :in_node] do
      session = ExBashkit.Session.new(isolation: isolation)
      {:ok, result} = ExBashkit.Session.exec(session, "echo \"precompiled $((6 * 7))\"")
      IO.puts("#{isolation}: " <> inspect(result.stdout))
    end

    IO.puts("priv: " <> List.to_string(:code.priv_dir(:ex_bashkit)))
    """

    {output, status} = run(ctx, "/good", ["run", "-e", script])

    assert status == 0, output
    assert output =~ ~s(process: "precompiled 42\\n")
    assert output =~ ~s(in_node: "precompiled 42\\n")
    assert output =~ "priv: #{ctx.dir}"
    assert_received {:http_request, _, "GET", "/good/" <> _}

    # Every file of the artifact is installed; the library under the name
    # ExBashkit.Native loads, executables under their own.
    assert_installed(ctx)
    assert File.read!(Path.join(ctx.cache, ctx.name)) == ctx.artifact

    # The installed library replaced by other bytes of the same size with a
    # newer mtime is still reinstalled (content hash, not size/mtime), from
    # the cache: no request reaches the server.
    lib = Path.join(ctx.dir, "priv/native/ex_bashkit.so")
    File.write!(lib, :binary.copy(<<0>>, File.stat!(lib).size))
    File.touch!(lib, System.os_time(:second) + 3600)

    {output, status} = run(ctx, "/good", ["compile"])
    assert status == 0, output
    assert output =~ "from cache"
    refute_received {:http_request, _, _, _}
    assert_installed(ctx)
  end

  test "a tampered artifact is a compile error naming both checksums; nothing installed or cached",
       ctx do
    write_sums(ctx, %{ctx.name => "sha256:" <> ctx.hex})
    {output, status} = run(ctx, "/tampered", ["compile"])

    assert_checksum_mismatch(ctx, {output, status}, ctx.hex, sha256(ctx.tampered))
  end

  test "a wrong checksum entry is a compile error naming both checksums", ctx do
    wrong = String.duplicate("0", 64)
    write_sums(ctx, %{ctx.name => "sha256:" <> wrong})
    {output, status} = run(ctx, "/good", ["compile"])

    assert_checksum_mismatch(ctx, {output, status}, wrong, ctx.hex)
  end

  test "a 404 without cargo fails with both ways out", ctx do
    write_sums(ctx, %{ctx.name => "sha256:" <> ctx.hex})
    {output, status} = run(ctx, "/missing", ["compile"])

    assert status != 0
    assert output =~ "HTTP 404"
    assert output =~ "#{ctx.server.url}/missing/#{ctx.name}"
    assert_both_ways_out(output)
    assert_nothing_installed(ctx)
  end

  test "a dead server without cargo fails with both ways out", ctx do
    write_sums(ctx, %{ctx.name => "sha256:" <> ctx.hex})
    {output, status} = run(ctx, "/good", ["compile"], base_url: dead_url())

    assert status != 0
    assert output =~ "cannot connect (connection refused)"
    assert_both_ways_out(output)
    assert_nothing_installed(ctx)
  end

  test "no checksum entry without cargo fails with both ways out, without a request", ctx do
    write_sums(ctx, %{})
    {output, status} = run(ctx, "/good", ["compile"])

    assert status != 0
    assert output =~ "has no entry for #{ctx.name}"
    assert_both_ways_out(output)
    refute_received {:http_request, _, _, _}
    assert_nothing_installed(ctx)
  end

  test "mix ex_bashkit.checksum writes the whole file from what the server has", ctx do
    sums = Path.join(ctx.dir, "all-sums.exs")

    args = [
      "ex_bashkit.checksum",
      "--base-url",
      ctx.server.url <> "/good",
      "--checksum-file",
      sums
    ]

    # Only this host's artifact is on the server: every other target is missing.
    {output, status} = FreshProject.mix(ctx.dir, args, path: ctx.no_cargo)
    assert status != 0
    assert output =~ "HTTP 404"
    assert output =~ "Nothing was written"
    refute File.exists?(sums)

    {output, status} = FreshProject.mix(ctx.dir, args ++ ["--ignore-missing"], path: ctx.no_cargo)
    assert status == 0, output
    assert {%{} = written, _} = Code.eval_file(sums)
    assert written == %{ctx.name => "sha256:" <> ctx.hex}
  end

  describe "with cargo on PATH" do
    # A `cargo` that records how it was called and fails: enough to prove
    # the source build was chosen, without rebuilding bashkit in the copy.
    setup ctx do
      bin = Path.join(ctx.dir, "fake-cargo-bin")
      File.mkdir_p!(bin)
      cargo = Path.join(bin, "cargo")
      File.write!(cargo, "#!/bin/sh\necho \"fake cargo: $*\"\nexit 3\n")
      File.chmod!(cargo, 0o755)
      %{with_cargo: bin <> ":" <> ctx.no_cargo}
    end

    test "no checksum entry falls back to the source build", ctx do
      write_sums(ctx, %{})
      {output, status} = run(ctx, "/good", ["compile"], path: ctx.with_cargo)

      assert status != 0
      assert output =~ "fake cargo: build --manifest-path native/ex_bashkit/Cargo.toml --release"
      refute_received {:http_request, _, _, _}
    end

    test "an unreachable server falls back to the source build", ctx do
      write_sums(ctx, %{ctx.name => "sha256:" <> ctx.hex})

      {output, status} =
        run(ctx, "/good", ["compile"], path: ctx.with_cargo, base_url: dead_url())

      assert status != 0
      assert output =~ "cannot connect"
      assert output =~ "building from source with cargo"
      assert output =~ "fake cargo: build"
    end

    test "EX_BASHKIT_BUILD=1 builds from source even when the artifact is available", ctx do
      write_sums(ctx, %{ctx.name => "sha256:" <> ctx.hex})

      {output, status} =
        run(ctx, "/good", ["compile"], path: ctx.with_cargo, env: [{"EX_BASHKIT_BUILD", "1"}])

      assert status != 0
      assert output =~ "fake cargo: build"
      refute_received {:http_request, _, _, _}
    end

    test "a checksum mismatch is an error even though cargo could build", ctx do
      write_sums(ctx, %{ctx.name => "sha256:" <> ctx.hex})
      {output, status} = run(ctx, "/tampered", ["compile"], path: ctx.with_cargo)

      assert status != 0
      assert output =~ "checksum mismatch"
      refute output =~ "fake cargo"
      assert_nothing_installed(ctx)
    end
  end

  defp run(ctx, base_path, args, opts \\ []) do
    base_url = Keyword.get(opts, :base_url, ctx.server.url <> base_path)

    FreshProject.mix(ctx.dir, args,
      path: Keyword.get(opts, :path, ctx.no_cargo),
      env:
        [{"EX_BASHKIT_BASE_URL", base_url}, {"EX_BASHKIT_CACHE_DIR", ctx.cache}] ++
          Keyword.get(opts, :env, [])
    )
  end

  defp write_sums(ctx, map) do
    body = Enum.map(map, fn {k, v} -> "  #{inspect(k)} => #{inspect(v)},\n" end)
    File.write!(Path.join(ctx.dir, @checksum_file), ["%{\n", body, "}\n"])
  end

  # A port nothing listens on: bound, then closed.
  defp dead_url do
    {:ok, socket} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(socket)
    :ok = :gen_tcp.close(socket)
    "http://127.0.0.1:#{port}/gone"
  end

  defp assert_installed(ctx) do
    for {entry, content} <- ctx.entries do
      installed = if String.ends_with?(entry, ".so"), do: "ex_bashkit.so", else: entry
      path = Path.join([ctx.dir, "priv/native", installed])
      assert File.read!(path) == content, "#{path} differs from #{entry} in the artifact"
    end
  end

  # The compile failed on the checksum, naming the artifact and both sums,
  # and left nothing behind.
  defp assert_checksum_mismatch(ctx, {output, status}, expected, actual) do
    assert status != 0
    assert output =~ "checksum mismatch"
    assert output =~ ctx.name
    assert output =~ "expected sha256:#{expected}"
    assert output =~ "actual   sha256:#{actual}"
    assert_nothing_installed(ctx)
  end

  defp assert_nothing_installed(ctx) do
    assert File.ls!(Path.join(ctx.dir, "priv/native")) == [".gitkeep"]
    assert not File.exists?(ctx.cache) or File.ls!(ctx.cache) == []
  end

  defp assert_both_ways_out(output) do
    assert output =~ "Two ways out"
    assert output =~ "EX_BASHKIT_BASE_URL"
    assert output =~ "install Rust"
    assert output =~ "EX_BASHKIT_BUILD=1"
  end

  defp sha256(data), do: Base.encode16(:crypto.hash(:sha256, data), case: :lower)
end
