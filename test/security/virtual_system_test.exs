defmodule ExBashkit.Security.VirtualSystemTest do
  # Inside the sandbox, /proc, /dev, /etc and the rest of the tree are
  # bashkit's virtual ones: they reveal nothing of the host (its processes,
  # hostname, kernel, users, files, devices), writes never reach the host
  # disk, and no command starts a real host process.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}

  setup_all do
    {:ok, hostname} = :inet.gethostname()

    host = %{
      os_pid: System.pid(),
      hostname: to_string(hostname),
      kernel: "/proc/sys/kernel/osrelease" |> File.read!() |> String.trim(),
      cwd: File.cwd!(),
      mem_total: Regex.run(~r/MemTotal:\s+(\d+)/, File.read!("/proc/meminfo")) |> List.last(),
      cpu_model:
        case Regex.run(~r/model name\s*:\s*(.+)/, File.read!("/proc/cpuinfo")) do
          [_, model] -> String.trim(model)
          nil -> nil
        end,
      passwd: File.read!("/etc/passwd")
    }

    %{host: host}
  end

  defp run!(s, script) do
    {:ok, %Result{stdout: out, stderr: err}} = Session.exec(s, script)
    out <> err
  end

  defp refute_host_facts(out, host) do
    refute out =~ "Pid:\t#{host.os_pid}\n", "the BEAM's OS pid leaked"

    unless host.hostname in ["localhost", "bashkit-sandbox"] do
      refute out =~ ~r/(^|[^\w.-])#{Regex.escape(host.hostname)}($|[^\w.-])/,
             "the host name leaked"
    end

    refute out =~ host.kernel, "the host kernel release leaked"
    refute out =~ host.cwd, "the BEAM's working directory leaked"
    refute out =~ "beam.smp"
    refute out =~ ~r/MemTotal:\s+#{host.mem_total} kB/, "the host's memory size leaked"
    if host.cpu_model, do: refute(out =~ host.cpu_model, "the host CPU model leaked")
  end

  test "/proc describes a virtual machine, not this host", %{host: host} do
    s = Session.new()

    out =
      run!(s, """
      ls -R /proc
      for f in /proc/self/* /proc/1/* /proc/cpuinfo /proc/meminfo /proc/version \
               /proc/loadavg /proc/uptime /proc/mounts /proc/self/mounts; do
        echo "== $f"; cat "$f"
      done
      readlink /proc/self/exe /proc/self/cwd /proc/self/root
      cat /proc/self/environ /proc/self/maps /proc/self/cmdline /proc/net/tcp /proc/kcore
      cat /proc/#{host.os_pid}/status /proc/#{host.os_pid}/cmdline
      """)

    refute_host_facts(out, host)
    # Our own process is not there under its real pid.
    assert {:ok, %Result{exit_code: 1}} = Session.exec(s, "test -e /proc/#{host.os_pid}")
    assert {:ok, %Result{stdout: ""}} = Session.exec(s, "cat /proc/self/environ")
  end

  test "/dev holds only virtual devices", %{host: host} do
    s = Session.new()
    {:ok, %Result{stdout: listing}} = Session.exec(s, "ls /dev")
    entries = String.split(listing, "\n", trim: true)
    assert entries -- ~w(fd null random urandom zero stdin stdout stderr tty) == []

    for dev <-
          ~w(/dev/sda /dev/vda /dev/mem /dev/kmem /dev/kmsg /dev/port /dev/shm /dev/tcp/127.0.0.1/22) do
      assert {:ok, %Result{stdout: ""}} = Session.exec(s, "cat #{dev} 2>/dev/null | head -c 16")
    end

    # The usual devices behave; writing to them touches nothing outside.
    assert {:ok, %Result{stdout: "8\n"}} = Session.exec(s, "head -c 8 /dev/urandom | wc -c")
    assert {:ok, %Result{stdout: "", exit_code: 0}} = Session.exec(s, "echo x > /dev/null")
    refute_host_facts(run!(s, "ls -la /dev /dev/fd"), host)
  end

  test "/etc is the sandbox's own: users, hostname, hosts", %{host: host} do
    s = Session.new(username: "agent", hostname: "box")

    out =
      run!(s, "cat /etc/passwd /etc/group /etc/hostname /etc/hosts /etc/os-release; ls -R /etc")

    refute_host_facts(out, host)

    users =
      for line <- String.split(run!(s, "cat /etc/passwd"), "\n", trim: true),
          do: line |> String.split(":") |> hd()

    assert Enum.sort(users) -- ["agent", "nobody", "sandbox"] == []

    host_lines = String.split(host.passwd, "\n", trim: true)
    root_line = Enum.find(host_lines, &String.starts_with?(&1, "root:"))
    if root_line, do: refute(out =~ root_line)

    assert run!(s, "cat /etc/shadow /etc/sudoers /etc/ssh/sshd_config 2>&1") =~ "No such file"
    assert run!(s, "hostname; whoami; id -u") == "box\nagent\n1000\n"
  end

  test "kernel and machine queries answer virtual values", %{host: host} do
    s = Session.new()

    out =
      run!(
        s,
        "uname -a; uname -r; uname -n; nproc; free; df; cat /proc/meminfo; ps aux; ulimit -a"
      )

    refute_host_facts(out, host)
  end

  test "host files are not reachable, by path or by any trick", %{host: host} do
    s = Session.new()
    project_file = Path.join(host.cwd, "mix.exs")
    assert File.exists?(project_file)

    for script <- [
          "cat #{project_file}",
          "cat /etc/../#{project_file}",
          "cd #{host.cwd} && cat mix.exs",
          "find / -name mix.exs",
          "ln -s #{project_file} /l; cat /l",
          "cat /proc/self/root#{project_file}",
          "cat /proc/1/cwd/mix.exs",
          "source #{project_file}",
          "cat < #{project_file}",
          "grep -r defmodule / 2>/dev/null | head -3"
        ] do
      out = run!(s, script)
      refute out =~ "defmodule ExBashkit.MixProject", "#{script} read a host file: #{out}"
    end

    assert {:error, _} = Session.read_file(s, project_file)
    assert {:error, _} = Session.stat(s, project_file)
  end

  test "writes stay in the virtual filesystem" do
    s = Session.new()

    marker =
      Path.join(System.tmp_dir!(), "ex_bashkit_escape_#{System.unique_integer([:positive])}")

    {:ok, %Result{exit_code: 0}} =
      Session.exec(s, "mkdir -p #{Path.dirname(marker)}; echo pwned > #{marker}; cat #{marker}")

    assert Session.read_file(s, marker) == {:ok, "pwned\n"}
    refute File.exists?(marker), "a script wrote to the host disk"
  end

  test "no command starts a real host process" do
    marker = Path.join(System.tmp_dir!(), "ex_bashkit_proc_#{System.unique_integer([:positive])}")
    s = Session.new()

    # Each of these would create `marker` on the host if it ran a real
    # program; in the sandbox each either fails or touches the virtual file.
    for script <- [
          "/bin/sh -c 'touch #{marker}'",
          "/usr/bin/env touch #{marker}",
          "exec /usr/bin/touch #{marker}",
          "command -p touch #{marker}",
          "awk 'BEGIN { system(\"touch #{marker}\") }'",
          "echo x | sed 'e touch #{marker}'",
          "find / -maxdepth 0 -exec touch #{marker} \\;",
          "echo #{marker} | xargs touch",
          "nohup touch #{marker}",
          "timeout 5 touch #{marker}",
          "eval 'touch #{marker}'",
          "bash -c 'touch #{marker}'",
          "python3 -c 'open(\"#{marker}\", \"w\")'",
          "perl -e 'open(F, \">#{marker}\")'",
          "git init #{marker}",
          "echo 'touch #{marker}' > /s.sh; chmod +x /s.sh; /s.sh"
        ] do
      Session.exec(s, script)
      refute File.exists?(marker), "#{script} created a file on the host"
    end
  end
end
