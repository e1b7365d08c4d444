defmodule ExBashkit.Security.NotFoundPrincipleTest do
  # The 404 principle on the filesystem: a path outside every mount reads as
  # absent ("No such file or directory"), never as forbidden. Real host
  # directories under System.tmp_dir. (The network half is in
  # network_test.exs, "the 404 principle".) Runs in both isolation modes.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HostDir

  defp run(session, script) do
    {:ok, %Result{} = result} = Session.exec(session, script)
    result
  end

  test "a host link pointing outside the mount reads like a missing file" do
    x = HostDir.create!(%{"data/a.txt" => "a\n", "secrets/s.txt" => "SECRET\n"})
    data = Path.join(x, "data")
    File.ln_s!(Path.join(x, "secrets/s.txt"), Path.join(data, "out"))
    File.ln_s!(Path.join(x, "secrets"), Path.join(data, "outdir"))
    s = Session.new(mounts: [{"/m", data, :read_only}])

    for {script, missing} <- [
          {"cat /m/out", "cat /m/nothing"},
          {"cat /m/outdir/s.txt", "cat /m/nothing/s.txt"},
          {"cd /m/outdir", "cd /m/nothing"}
        ] do
      out = run(s, script <> "; echo \"rc=$?\"")
      ref = run(s, missing <> "; echo \"rc=$?\"")
      assert out.stdout == ref.stdout, "#{script}: #{inspect(out)} vs #{inspect(ref)}"
      assert out.stderr =~ "No such file or directory", "#{script}: #{inspect(out)}"

      refute out.stderr =~ ~r/denied|not allowed|outside|permission/i,
             "#{script}: #{inspect(out)}"
    end

    assert {:error, message} = Session.read_file(s, "/m/out")
    assert message =~ ~r/no such file or directory/i
  end

  test "a path outside every mount is simply not there" do
    x = HostDir.create!(%{"data/a.txt" => "a\n", "secret.txt" => "SECRET\n"})
    s = Session.new(mounts: [{"/m", Path.join(x, "data"), :read_only}])
    out = run(s, "cat /m/../secret.txt; cat /m/../../secret.txt; echo rc=$?")
    assert out.stdout == "rc=1\n"
    assert out.stderr =~ "No such file or directory"
    refute out.stderr =~ ~r/denied|not allowed|permission/i
  end
end
