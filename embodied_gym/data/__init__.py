"""LeRobotDataset recording and open-loop replay."""
